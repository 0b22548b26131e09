package clockshim

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// shimServer builds the shim and starts a redis-server reading a fresh
// Clock through it.
func shimServer(t *testing.T) (*Clock, *redis.Client, *redisserver.Server, string) {
	t.Helper()
	Require(t)
	bin := redisserver.Require(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lib, err := Build(ctx, dir)
	require.NoError(t, err)
	clock, err := NewClock(filepath.Join(dir, "clock"))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, clock.Close()) })
	srv, err := redisserver.Start(ctx, redisserver.Options{Binary: bin, Env: Env(lib, clock)})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, srv.Close()) })
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Protocol: 2, DisableIdentity: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return clock, rdb, srv, lib
}

// serverOffset is how far the server's TIME is ahead of this process's
// clock, bracketed by two readings of ours.
func serverOffset(t *testing.T, rdb *redis.Client) (lo, hi time.Duration) {
	t.Helper()
	before := time.Now()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	after := time.Now()
	return now.Sub(after), now.Sub(before)
}

// The invariant: a redis-server started with the shim reads the node time
// the Clock says, for TIME and for key expiry, forward and back, and at a
// rate, changed while it runs; and it really is the shim (mapped into the
// process) that does it.
func TestShim_MovesRedisServerClock(t *testing.T) {
	clock, rdb, srv, lib := shimServer(t)
	ctx := context.Background()

	loaded, err := Loaded(srv.Pid(), lib)
	require.NoError(t, err)
	assert.True(t, loaded, "the shim is not mapped into redis-server")

	lo, hi := serverOffset(t, rdb)
	assert.True(t, lo < 50*time.Millisecond && hi > -50*time.Millisecond, "offset 0: TIME off by %v..%v", lo, hi)

	// Forward one hour: TIME jumps and a 5 s key expires at once.
	require.NoError(t, rdb.Set(ctx, "k", "v", 5*time.Second).Err())
	require.NoError(t, clock.Set(time.Hour, 1, time.Now()))
	lo, hi = serverOffset(t, rdb)
	assert.True(t, lo < time.Hour+50*time.Millisecond && hi > time.Hour-50*time.Millisecond, "+1h: TIME off by %v..%v", lo, hi)
	assert.ErrorIs(t, rdb.Get(ctx, "k").Err(), redis.Nil, "a 5 s key survived a 1 h step")

	// Back two seconds from real time: a key's TTL grows by the step.
	require.NoError(t, clock.Set(0, 1, time.Now()))
	require.NoError(t, rdb.Set(ctx, "b", "v", 3*time.Second).Err())
	require.NoError(t, clock.Set(-2*time.Second, 1, time.Now()))
	lo, hi = serverOffset(t, rdb)
	assert.True(t, lo < -2*time.Second+50*time.Millisecond && hi > -2*time.Second-50*time.Millisecond, "−2s: TIME off by %v..%v", lo, hi)
	ttl, err := rdb.PTTL(ctx, "b").Result()
	require.NoError(t, err)
	assert.Greater(t, ttl, 4500*time.Millisecond, "after a 2 s step back a 3 s key should have about 5 s left")

	// Rate 3 from now: the clock gains 2 s per real second. The server
	// read its clock at some real instant r between before and after, so
	// TIME lies between before + 2(before − start) and after + 2(after −
	// start).
	start := time.Now()
	require.NoError(t, clock.Set(0, 3, start))
	time.Sleep(200 * time.Millisecond)
	before := time.Now()
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	after := time.Now()
	const slack = 5 * time.Millisecond
	assert.WithinRange(t, now, before.Add(2*before.Sub(start)-slack), after.Add(2*after.Sub(start)+slack), "rate 3")
}

// Without the file (or with the variable unset) the shim gives real time;
// Set refuses a rate that is not a positive finite number.
func TestClock_SetValidatesAndClose(t *testing.T) {
	c, err := NewClock(filepath.Join(t.TempDir(), "clock"))
	require.NoError(t, err)
	for _, r := range []float64{0, -1} {
		assert.Error(t, c.Set(0, r, time.Now()), "rate %v", r)
	}
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	assert.Error(t, c.Set(0, 1, time.Now()))
}

// A process's maps do not list a library it did not load.
func TestLoaded_OnlyWhatIsMapped(t *testing.T) {
	ok, err := Loaded(os.Getpid(), "/nonexistent/libclockshim.so")
	require.NoError(t, err)
	assert.False(t, ok)
	_, err = Loaded(-1, "x")
	assert.Error(t, err)
}

// A compiler error is reported with the compiler's output.
func TestBuild_ReportsCompilerFailure(t *testing.T) {
	Require(t)
	t.Setenv("CC", "false")
	_, err := Build(context.Background(), t.TempDir())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "failed")
	t.Setenv("CC", "/nonexistent/cc")
	_, err = Compiler()
	assert.ErrorContains(t, err, "no C compiler")
}
