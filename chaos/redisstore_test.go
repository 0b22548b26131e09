package chaos

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/clockshim"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// startRedisStore starts a RedisStore for the test and closes it at the end.
func startRedisStore(t *testing.T) *RedisStore {
	t.Helper()
	bin := redisserver.Require(t)
	s, err := StartRedisStore(tctx(t, 10*time.Second), bin)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

// Both stores keep the contract: refuse a lower token, take an equal or
// higher one, end concurrent writes with the highest token.
func TestFencedStores_KeepTheContract(t *testing.T) {
	ctx := tctx(t, 30*time.Second)
	require.NoError(t, CheckFencedStore(ctx, NewRegisterStore()))
	t.Run("redis", func(t *testing.T) {
		s := startRedisStore(t)
		require.NoError(t, CheckFencedStore(ctx, s))
		ok, err := s.Write(ctx, 42)
		require.NoError(t, err)
		assert.True(t, ok)
		top, err := s.Highest(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(42), top)
		assert.Contains(t, s.Name(), "fencing.SetIfNewer")
	})
}

// A store that breaks the contract is caught: one that takes every write.
func TestCheckFencedStore_CatchesAStoreThatTakesEverything(t *testing.T) {
	err := CheckFencedStore(context.Background(), takeAll{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "write of token 3: accepted true, want false")
}

type takeAll struct{}

func (takeAll) Name() string                                { return "take-all" }
func (takeAll) Reset(context.Context) error                 { return nil }
func (takeAll) Write(context.Context, uint64) (bool, error) { return true, nil }

// failing is a store whose writes fail after n successes.
type failing struct{ n int }

func (f *failing) Name() string                { return "failing" }
func (f *failing) Reset(context.Context) error { return nil }
func (f *failing) Write(context.Context, uint64) (bool, error) {
	if f.n--; f.n < 0 {
		return false, errors.New("disk on fire")
	}
	return true, nil
}

// A fenced store that fails stops the run with its error: a write whose
// outcome is unknown cannot be judged.
func TestRun_FencedStoreErrorIsAHarnessError(t *testing.T) {
	cluster := newTestCluster(t, ClusterOptions{Nodes: 3, Fenced: &failing{n: 1}})
	s := Scenario{
		Name: "one-hold", Expect: Safe, Duration: 20 * time.Second,
		// One hold that writes a few times; generous timeouts for a loaded
		// machine. The trial ends when the client is done.
		Workload: Workload{Clients: 1, TTL: 5 * time.Second, NodeTimeout: time.Second, Hold: 30 * time.Millisecond,
			WriteEvery: 5 * time.Millisecond, MaxAcquires: 1, AcquireTimeout: 15 * time.Second},
	}
	_, err := Run(tctx(t, 30*time.Second), cluster, s, 1, 1, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk on fire")
}

// The scenarios where the fenced resource decides something, against a
// Redis compare-and-set on a redis-server of its own, on real redis-server
// nodes with real clocks: each verdict is the expected one, the store
// accepts no stale write (except where fencing's documented limit is the
// point: clock-back-amnesia), and porcupine's cross-check of the store's
// history agrees with the oracle (else Run fails).
func TestStoreScenarios_RedisCompareAndSet(t *testing.T) {
	clockshim.Require(t)
	store := startRedisStore(t)
	cluster := newTestCluster(t, ClusterOptions{Backend: RedisServer, Nodes: 5, Clocks: ClockReal, Fenced: store})
	// Closed before the cluster's clean-up counts the redis-server pids left.
	t.Cleanup(func() { assert.NoError(t, store.Close()) })
	runStoreScenarios(t, cluster)
}

func runStoreScenarios(t *testing.T, cluster *Cluster) {
	for _, s := range StoreScenarios() {
		t.Run(s.Name, func(t *testing.T) {
			res, err := Run(tctx(t, time.Minute), cluster, s.Scaled(testTimeScale), 1, 5, nil)
			require.NoError(t, err)
			require.Empty(t, res.Skipped)
			assert.Equal(t, cluster.FencedStore().Name(), res.FencedStore)
			assert.Equal(t, s.Expect, res.Observed, "notes: %v", res.Notes)
			fenced := res.Reports[0].FencedWrites
			assert.Positive(t, fenced, "no write reached the store")
			if s.FencingBreaks {
				assert.Positive(t, res.TokenOrder)
				return
			}
			assert.Zero(t, res.StaleFenced)
			assert.Zero(t, res.TokenOrder)
		})
	}
}
