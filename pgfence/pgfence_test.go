package pgfence

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/internal/clockshim"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

func init() {
	// The scenarios kill nodes on purpose: no "failed to dial" lines.
	redis.SetLogger(&logging.VoidLogger{})
}

// testTimeScale stretches the scenarios as the chaos package's own tests
// do: the race detector on 2 shared cores.
const testTimeScale = 3

// ctxFor returns a context that ends after d or at the end of the test.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// shared is the package's one PostgreSQL server (initdb and a start take
// seconds), started by the first test that needs it; TestMain stops it and
// checks that nothing is left.
var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// startStore returns the shared server and a new Store on it, closed at the
// end of the test.
func startStore(t *testing.T) (*Server, *Store) {
	t.Helper()
	bin := Require(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		shared.srv, shared.err = StartServer(ctx, bin)
	})
	require.NoError(t, shared.err)
	store, err := NewStore(ctxFor(t, 30*time.Second), shared.srv.ConnString())
	require.NoError(t, err)
	t.Cleanup(store.Close)
	return shared.srv, store
}

// The server is the one we started (postmaster.pid names our pid), running
// as postgres when we are root, in a data directory of its own. (TestMain
// checks that Close stops it and removes the directory.)
func TestServer_VerifiedByPid(t *testing.T) {
	srv, _ := startStore(t)
	pidFile, err := os.ReadFile(filepath.Join(srv.dir, "data", "postmaster.pid"))
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(pidFile), "\n")
	assert.Equal(t, strconv.Itoa(srv.Pid()), first)
	assert.True(t, srv.Running())
	if os.Geteuid() == 0 {
		st, err := os.Stat("/proc/" + strconv.Itoa(srv.Pid()))
		require.NoError(t, err)
		assert.NotZero(t, st.Sys().(*syscall.Stat_t).Uid, "postgres runs as root")
	}
}

// The SQL of docs/fencing.md keeps the contract the harness relies on:
// a lower token matches no row (stale), an equal or higher one updates it,
// and concurrent writers end with the highest token.
func TestStore_KeepsTheContract(t *testing.T) {
	_, store := startStore(t)
	ctx := ctxFor(t, time.Minute)
	require.NoError(t, chaos.CheckFencedStore(ctx, store))
	ok, err := store.Write(ctx, 1<<63)
	assert.ErrorIs(t, err, ErrTokenRange)
	assert.False(t, ok)
	ok, err = store.Write(ctx, 77)
	require.NoError(t, err)
	assert.True(t, ok)
	fence, err := store.Fence(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(77), fence)
	assert.Contains(t, store.Name(), "PostgreSQL 1")
}

// The scenarios where the fenced resource decides something, with
// PostgreSQL as that resource, on real redis-server nodes with real clocks:
// each verdict is the expected one; PostgreSQL accepts no stale write
// (except in clock-back-amnesia, fencing's documented limit, where the
// tokens themselves go out of order and PostgreSQL refuses the later
// holder's writes); porcupine's cross-check agrees with the oracle (else
// Run fails).
func TestStoreScenarios_PostgreSQL(t *testing.T) {
	redisserver.Require(t)
	clockshim.Require(t)
	_, store := startStore(t)
	cluster, err := chaos.NewCluster(ctxFor(t, time.Minute), chaos.ClusterOptions{
		Backend: chaos.RedisServer, Nodes: 5, Clocks: chaos.ClockReal, Fenced: store})
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, cluster.Close())
		assert.Empty(t, redisserver.LivePids())
	})
	for _, s := range chaos.StoreScenarios() {
		t.Run(s.Name, func(t *testing.T) {
			res, err := chaos.Run(ctxFor(t, 2*time.Minute), cluster, s.Scaled(testTimeScale), 1, 5, nil)
			require.NoError(t, err)
			require.Empty(t, res.Skipped)
			assert.Equal(t, store.Name(), res.FencedStore)
			assert.Contains(t, res.Clocks, "real")
			assert.Equal(t, s.Expect, res.Observed, "notes: %v", res.Notes)
			assert.Positive(t, res.Reports[0].FencedWrites, "no write reached PostgreSQL")
			if s.FencingBreaks {
				assert.Positive(t, res.TokenOrder)
				return
			}
			assert.Zero(t, res.StaleFenced)
			assert.Zero(t, res.TokenOrder)
		})
	}
}
