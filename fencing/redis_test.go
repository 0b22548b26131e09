package fencing_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/fencing"
)

// newStore starts a miniredis and a go-redis client to it, both closed when
// the test ends.
func newStore(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr(), MaxRetries: -1, DisableIdentity: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

func TestSetIfNewer(t *testing.T) {
	ctx := context.Background()
	m, rdb := newStore(t)

	_, _, err := fencing.GetWithToken(ctx, rdb, "report:42")
	require.ErrorIs(t, err, redis.Nil, "never written")
	assert.Equal(t, redis.Nil, err, "redis.Nil itself, as go-redis's Get returns it")

	require.NoError(t, fencing.SetIfNewer(ctx, rdb, "report:42", 33, "A's report"))
	v, tok, err := fencing.GetWithToken(ctx, rdb, "report:42")
	require.NoError(t, err)
	assert.Equal(t, "A's report", v)
	assert.Equal(t, uint64(33), tok)
	// The layout is documented: a hash with fields value and token.
	assert.Equal(t, "A's report", m.HGet("report:42", "value"))
	assert.Equal(t, "33", m.HGet("report:42", "token"))

	require.NoError(t, fencing.SetIfNewer(ctx, rdb, "report:42", 34, "B's report"))
	require.NoError(t, fencing.SetIfNewer(ctx, rdb, "report:42", 34, "B's report, v2"), "equal token")

	err = fencing.SetIfNewer(ctx, rdb, "report:42", 33, "A's late write")
	require.ErrorIs(t, err, fencing.ErrStale)
	var se *fencing.StaleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, fencing.StaleError{Token: 33, Highest: 34}, *se)

	v, tok, err = fencing.GetWithToken(ctx, rdb, "report:42")
	require.NoError(t, err)
	assert.Equal(t, "B's report, v2", v, "the stale write changed nothing")
	assert.Equal(t, uint64(34), tok)

	// Other keys are independent; an empty value is a value.
	require.NoError(t, fencing.SetIfNewer(ctx, rdb, "report:43", 1, ""))
	v, tok, err = fencing.GetWithToken(ctx, rdb, "report:43")
	require.NoError(t, err)
	assert.Equal(t, "", v)
	assert.Equal(t, uint64(1), tok)
}

// Tokens are compared exactly over the whole uint64 range. A Lua tonumber
// comparison would round 2^53+1 down to 2^53 and accept the lower token.
func TestSetIfNewerComparesLargeTokensExactly(t *testing.T) {
	ctx := context.Background()
	_, rdb := newStore(t)
	cases := []struct{ stored, lower uint64 }{
		{1 << 53, 1<<53 - 1},
		{1<<53 + 1, 1 << 53},
		{math.MaxUint64, math.MaxUint64 - 1},
		{1_000_000_000, 999_999_999},                             // lengths differ
		{12_345_678_901_234_567_890, 12_345_678_901_234_567_889}, // low 9 digits differ
		{12_345_678_911_234_567_890, 12_345_678_901_234_567_890}, // high digits differ
		{10_000_000_000_000_000_000, 9_999_999_999_999_999_999},  // 20 vs 19 digits
		{18_446_744_073_709_551_615, 18_446_744_063_709_551_615}, // max vs one high digit less
		{2, 1},
	}
	for i, c := range cases {
		key := fmt.Sprintf("k%d", i)
		require.NoError(t, fencing.SetIfNewer(ctx, rdb, key, c.lower, "lower"))
		require.NoError(t, fencing.SetIfNewer(ctx, rdb, key, c.stored, "stored"))
		err := fencing.SetIfNewer(ctx, rdb, key, c.lower, "lower again")
		var se *fencing.StaleError
		require.ErrorAs(t, err, &se, "%d after %d", c.lower, c.stored)
		assert.Equal(t, c.stored, se.Highest)
		require.NoError(t, fencing.SetIfNewer(ctx, rdb, key, c.stored, "equal"), "%d twice", c.stored)
		v, tok, err := fencing.GetWithToken(ctx, rdb, key)
		require.NoError(t, err)
		assert.Equal(t, "equal", v)
		assert.Equal(t, c.stored, tok)
	}
}

// Writers race on one key with shuffled tokens; the key ends with the value
// of the highest token, and every refusal names a higher stored token.
func TestSetIfNewerConcurrentWritersEndWithHighest(t *testing.T) {
	ctx := context.Background()
	_, rdb := newStore(t)
	const writers = 64
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		stale int
	)
	start := make(chan struct{})
	for _, tok := range rand.Perm(writers) {
		tok := uint64(tok + 1)
		wg.Go(func() {
			<-start
			err := fencing.SetIfNewer(ctx, rdb, "shared", tok, fmt.Sprintf("written with %d", tok))
			if err == nil {
				return
			}
			var se *fencing.StaleError
			if assert.ErrorAs(t, err, &se) {
				assert.Greater(t, se.Highest, tok)
			}
			mu.Lock()
			stale++
			mu.Unlock()
		})
	}
	close(start)
	wg.Wait()

	v, tok, err := fencing.GetWithToken(ctx, rdb, "shared")
	require.NoError(t, err)
	assert.Equal(t, uint64(writers), tok)
	assert.Equal(t, fmt.Sprintf("written with %d", writers), v)
	assert.Less(t, stale, writers)
}

func TestSetIfNewerErrors(t *testing.T) {
	ctx := context.Background()
	m, rdb := newStore(t)

	// A key of another type: Redis's error, not a false "stale".
	require.NoError(t, m.Set("plain", "x"))
	err := fencing.SetIfNewer(ctx, rdb, "plain", 1, "v")
	require.Error(t, err)
	assert.NotErrorIs(t, err, fencing.ErrStale)
	assert.ErrorContains(t, err, "WRONGTYPE")
	_, _, err = fencing.GetWithToken(ctx, rdb, "plain")
	assert.ErrorContains(t, err, "WRONGTYPE")

	// A hash that is not a fenced value: a value without a token.
	m.HSet("other", "value", "x")
	_, _, err = fencing.GetWithToken(ctx, rdb, "other")
	assert.ErrorContains(t, err, "not a fenced value")
	assert.NotErrorIs(t, err, redis.Nil)

	// The caller's context ending stays visible.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, fencing.SetIfNewer(cctx, rdb, "report", 1, "v"), context.Canceled)
	_, _, err = fencing.GetWithToken(cctx, rdb, "report")
	assert.ErrorIs(t, err, context.Canceled)

	// A server that lost its script cache (restart, SCRIPT FLUSH) still runs
	// them: go-redis falls back from EVALSHA to EVAL.
	require.NoError(t, fencing.SetIfNewer(ctx, rdb, "report", 5, "five"))
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	require.ErrorIs(t, fencing.SetIfNewer(ctx, rdb, "report", 4, "four"), fencing.ErrStale)
	require.NoError(t, rdb.ScriptFlush(ctx).Err())
	v, tok, err := fencing.GetWithToken(ctx, rdb, "report")
	require.NoError(t, err)
	assert.Equal(t, "five", v)
	assert.Equal(t, uint64(5), tok)
}
