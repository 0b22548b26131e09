package redlock_test

import (
	"context"
	"math"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

func TestNoRetry(t *testing.T) {
	for attempt := 1; attempt <= 3; attempt++ {
		_, ok := redlock.NoRetry().NextRetry(attempt)
		assert.False(t, ok, "attempt %d", attempt)
	}
}

func TestRetryFunc(t *testing.T) {
	var got []int
	p := redlock.RetryFunc(func(attempt int) (time.Duration, bool) {
		got = append(got, attempt)
		return time.Duration(attempt) * time.Millisecond, attempt < 2
	})
	d, ok := p.NextRetry(1)
	assert.Equal(t, time.Millisecond, d)
	assert.True(t, ok)
	_, ok = p.NextRetry(2)
	assert.False(t, ok)
	assert.Equal(t, []int{1, 2}, got)
}

func TestLinearRetry(t *testing.T) {
	p := redlock.LinearRetry(10*time.Millisecond, 5*time.Millisecond, 3)
	seen := map[time.Duration]bool{}
	for range 200 {
		d, ok := p.NextRetry(1)
		require.True(t, ok)
		require.GreaterOrEqual(t, d, 10*time.Millisecond)
		require.LessOrEqual(t, d, 15*time.Millisecond)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 1, "the jitter must vary the delay")
	_, ok := p.NextRetry(2)
	assert.True(t, ok, "a third attempt is allowed")
	_, ok = p.NextRetry(3)
	assert.False(t, ok, "three attempts in all")

	// No jitter: the delay is exact. No limit: it never gives up.
	p = redlock.LinearRetry(7*time.Millisecond, 0, 0)
	for _, attempt := range []int{1, 2, 100, 1 << 20} {
		d, ok := p.NextRetry(attempt)
		assert.True(t, ok)
		assert.Equal(t, 7*time.Millisecond, d)
	}
}

func TestExponentialRetry(t *testing.T) {
	base, maxDelay := 10*time.Millisecond, 250*time.Millisecond
	p := redlock.ExponentialRetry(base, maxDelay, 0)
	for attempt, ceil := range map[int]time.Duration{
		1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 3: 40 * time.Millisecond,
		5: 160 * time.Millisecond, 6: 250 * time.Millisecond, 40: 250 * time.Millisecond, 1000: 250 * time.Millisecond,
	} {
		var top time.Duration
		for range 300 {
			d, ok := p.NextRetry(attempt)
			require.True(t, ok)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.LessOrEqual(t, d, ceil, "attempt %d", attempt)
			top = max(top, d)
		}
		// Full jitter over [0, ceil]: 300 draws reach the upper half.
		assert.Greater(t, top, ceil/2, "attempt %d", attempt)
	}

	// A large base must not overflow into a zero delay after many attempts
	// (a hot retry loop against every node).
	p = redlock.ExponentialRetry(20*time.Second, time.Minute, 0)
	for _, attempt := range []int{3, 29, 30, 31, 62, 63, 64, 1000} {
		var top time.Duration
		for range 300 {
			d, ok := p.NextRetry(attempt)
			require.True(t, ok)
			require.LessOrEqual(t, d, time.Minute, "attempt %d", attempt)
			top = max(top, d)
		}
		assert.Greater(t, top, 30*time.Second, "attempt %d", attempt)
	}

	require.NotPanics(t, func() {
		d, _ := redlock.ExponentialRetry(base, maxDelay, 0).NextRetry(0)
		assert.LessOrEqual(t, d, base)
	})
	// "No cap" spelled as the largest duration.
	require.NotPanics(t, func() {
		for _, attempt := range []int{1, 40, 64, 100} {
			d, ok := redlock.ExponentialRetry(base, math.MaxInt64, 0).NextRetry(attempt)
			assert.True(t, ok)
			assert.GreaterOrEqual(t, d, time.Duration(0))
		}
		d, _ := redlock.LinearRetry(time.Millisecond, math.MaxInt64-time.Millisecond, 0).NextRetry(1)
		assert.GreaterOrEqual(t, d, time.Millisecond)
	})

	p = redlock.ExponentialRetry(base, maxDelay, 2)
	_, ok := p.NextRetry(1)
	assert.True(t, ok)
	_, ok = p.NextRetry(2)
	assert.False(t, ok)
}

func TestDefaultRetry(t *testing.T) {
	p := redlock.DefaultRetry()
	for _, attempt := range []int{1, 2, 10, 1000} {
		d, ok := p.NextRetry(attempt)
		assert.True(t, ok, "the default retries until the context ends")
		assert.LessOrEqual(t, d, 250*time.Millisecond)
	}
}

// countAcquires counts the acquire-script calls each node receives.
func countAcquires(c *cluster) *atomic.Int64 {
	var n atomic.Int64
	for _, nd := range c.nodes {
		nd.SlowIf(0, func(cmd string, args []string) bool {
			if (cmd == "EVALSHA" || cmd == "EVAL") && len(args) > 1 && args[1] == "3" {
				n.Add(1)
			}
			return false
		})
	}
	return &n
}

func TestTryAcquire_MakesOneAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// The client's policy would retry forever; TryAcquire overrides it.
		c := newWarmCluster(t, 3, redlock.WithRetry(redlock.LinearRetry(time.Millisecond, 0, 0)), redlock.WithFencing(false), noGuard)
		c.holdElsewhere(t, "report", ttl10s, 0, 1, 2)
		calls := countAcquires(c)

		start := time.Now()
		_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.Zero(t, time.Since(start))
		assert.Equal(t, 1, quorumError(t, err).Attempts)
		synctest.Wait()
		assert.Equal(t, int64(3), calls.Load(), "one acquire call per node")
	})
}

func TestAcquire_RetriesUntilKeyExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		c.holdElsewhere(t, "report", 300*time.Millisecond, 0, 1, 2) // a crashed holder

		start := time.Now()
		l, err := c.rl.Acquire(context.Background(), "report", ttl10s,
			redlock.WithRetry(redlock.LinearRetry(50*time.Millisecond, 0, 0)))
		require.NoError(t, err)
		elapsed := time.Since(start)
		assert.GreaterOrEqual(t, elapsed, 300*time.Millisecond)
		assert.Less(t, elapsed, 400*time.Millisecond)
		assert.GreaterOrEqual(t, l.Attempts(), 6)
		require.NoError(t, l.Release(context.Background()))
	})
}

func TestAcquire_RetriesUntilHolderReleases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		first := c.acquire(t, ctx, "report", ttl10s)
		go func() {
			time.Sleep(time.Second)
			assert.NoError(t, first.Release(ctx))
		}()

		start := time.Now()
		second, err := c.rl.Acquire(ctx, "report", ttl10s) // default policy
		require.NoError(t, err)
		assert.GreaterOrEqual(t, time.Since(start), time.Second)
		assert.Less(t, time.Since(start), time.Second+250*time.Millisecond, "the default backoff is at most 250 ms")
		assert.Greater(t, second.Attempts(), 1)
		assert.Greater(t, second.Token(), first.Token())
		require.NoError(t, second.Release(ctx))
	})
}

func TestAcquire_RetryPolicyLimitsAttempts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3, redlock.WithFencing(false), noGuard)
		c.holdElsewhere(t, "report", ttl10s, 0, 1, 2)
		calls := countAcquires(c)

		var seen []int
		policy := redlock.RetryFunc(func(attempt int) (time.Duration, bool) {
			seen = append(seen, attempt)
			return 5 * time.Millisecond, attempt < 4
		})
		start := time.Now()
		_, err := c.rl.Acquire(context.Background(), "report", ttl10s, redlock.WithRetry(policy))
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.Equal(t, 4, quorumError(t, err).Attempts)
		assert.Equal(t, []int{1, 2, 3, 4}, seen)
		assert.Equal(t, 15*time.Millisecond, time.Since(start), "three waits of 5 ms")
		synctest.Wait()
		assert.Equal(t, int64(4*3), calls.Load())
	})
}

func TestAcquire_ContextEndsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		c.holdElsewhere(t, "report", time.Hour, 0, 1, 2)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()

		start := time.Now()
		_, err := c.rl.Acquire(ctx, "report", ttl10s) // default policy: until ctx ends
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start), "gives up when the context ends, not later")
		assert.Greater(t, quorumError(t, err).Attempts, 4)
	})
}

// TestAcquire_MemoryBoundedWhateverTheAttempts: one Acquire that fails
// thousands of times in a row, with no delay between attempts (as the bench's
// AcquireMemory case), keeps only its latest attempt's node calls, so the
// live heap stays flat while it waits. The heap is read from attempt 1000 on:
// until then it still grows once by some 25-35 KB whatever the number of
// attempts (timers and buffers of net.Pipe, go-redis and miniredis reaching
// their steady state). It grew by one pooled connection (64 KB of go-redis
// buffers) now and then when an attempt started while the last one's
// clean-up still held a connection, and by ~370 B per attempt when every
// attempt's wait was kept.
func TestAcquire_MemoryBoundedWhateverTheAttempts(t *testing.T) {
	const from, attempts = 1000, 3500
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		c.holdElsewhere(t, "report", time.Hour, 0, 1, 2)
		heap := func() uint64 {
			// Timers still pending (the acquire calls' deadlines, a TTL from
			// their attempt, the connections' read deadlines) are freed only
			// when they fire: let them.
			time.Sleep(11 * time.Second)
			synctest.Wait()
			runtime.GC() // twice: sync.Pool caches survive one
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		var h0, h1 uint64
		policy := redlock.RetryFunc(func(attempt int) (time.Duration, bool) {
			switch {
			case attempt == from:
				h0 = heap()
			case attempt == attempts:
				h1 = heap()
			}
			return 0, attempt < attempts
		})
		_, err := c.rl.Acquire(context.Background(), "report", ttl10s, redlock.WithRetry(policy))
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.Equal(t, attempts, quorumError(t, err).Attempts)
		growth := int64(h1) - int64(h0)
		t.Logf("heap growth from attempt %d to %d: %d B", from, attempts, growth)
		// 16 KB: under -race a reading still wobbles by up to ~8 KB, while one
		// more pooled connection is 64 KB.
		assert.LessOrEqual(t, growth, int64(16<<10), "the heap grows with the number of attempts")
	})
}

// Acquire stops retrying once so many nodes answer with an error reply that
// no retry fixes that a majority is out of reach, whatever the policy, and
// says why; a transient error reply, or such errors on a minority, leave
// the retry policy in charge.
func TestAcquire_StopsOnErrorsNoRetryFixes(t *testing.T) {
	for _, reply := range []string{
		"NOAUTH Authentication required.",
		"WRONGPASS invalid username-password pair or user is disabled.",
		"NOPERM this user has no permissions to run the 'evalsha' command",
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"ERR unknown command 'evalsha', with args beginning with: ",
	} {
		t.Run(reply[:strings.IndexByte(reply, ' ')], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 3)
				c.nodes[0].Fail(reply)
				c.nodes[1].Fail(reply)
				_, err := c.rl.Acquire(context.Background(), "report", 10*time.Second) // no deadline
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				qe := quorumError(t, err)
				assert.Equal(t, 1, qe.Attempts, "retrying cannot help")
				assert.ErrorContains(t, err, "2 of 3 nodes answer with an error that retrying cannot fix (not retried): node "+c.rl.Nodes()[0]+" ")
				assert.ErrorContains(t, err, "(it answered: "+reply+")")
				assert.ErrorIs(t, err, redlock.ErrMisconfigured)
				var re redis.Error
				require.ErrorAs(t, err, &re)
				assert.Equal(t, reply, re.Error())
				assert.NotErrorIs(t, err, redlock.ErrTaken)
			})
		})
	}
	t.Run("transient", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			c.nodes[0].Fail("LOADING Redis is loading the dataset in memory")
			c.nodes[1].Fail("LOADING Redis is loading the dataset in memory")
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_, err := c.rl.Acquire(ctx, "report", 10*time.Second)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Greater(t, quorumError(t, err).Attempts, 1, "a loading node may answer the next attempt")
		})
	})
	t.Run("minority", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			c.holdElsewhere(t, "report", 50*time.Millisecond, 2)
			c.nodes[0].Fail("WRONGPASS invalid username-password pair or user is disabled.")
			l, err := c.rl.Acquire(context.Background(), "report", 10*time.Second)
			require.NoError(t, err, "nodes 1 and 2 are a majority once the other holder's key expires")
			assert.Greater(t, l.Attempts(), 1)
			require.NoError(t, l.Release(context.Background()))
		})
	})
}

// READONLY from a node the Client talks to directly (a *redis.Client, as
// Dial makes) means it is a replica: Acquire fails at once, saying so, and
// does not retry. (On a Sentinel failover client, which switches to the new
// master by itself, READONLY is retried: TestUnfixableOn_ReadOnlyOnFailoverClient.)
func TestAcquire_ReadOnlyReplicaFailsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		const readOnly = "READONLY You can't write against a read only replica."
		c.nodes[0].Fail(readOnly)
		c.nodes[1].Fail(readOnly)
		_, err := c.rl.Acquire(context.Background(), "report", 10*time.Second) // no deadline
		require.ErrorIs(t, err, redlock.ErrMisconfigured)
		assert.Equal(t, 1, quorumError(t, err).Attempts)
		assert.ErrorContains(t, err, "node "+c.rl.Nodes()[0]+" is a read-only replica")
	})
}
