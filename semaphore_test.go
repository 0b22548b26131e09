package redlock_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// permitKeysLeft counts the keys of semaphore name's slots on every node.
func (c *cluster) permitKeysLeft(name string, slots int) int {
	k := 0
	for i := range slots {
		k += c.holders(redlock.PermitKey(name, i))
	}
	return k
}

// Three permits: three holders on three distinct slots, the fourth is told
// that all are taken (not an outage), and a release lets the next one in on
// the freed slot. Nothing is left once every permit is released.
func TestSemaphore_AtMostPermitsHolders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 5, noGuard)
		sem, err := c.rl.Semaphore("api", 3)
		require.NoError(t, err)
		assert.Equal(t, "api", sem.Name())
		assert.Equal(t, 3, sem.Permits())
		var held []*redlock.Permit
		slots := map[int]bool{}
		for range 3 {
			p, err := sem.TryAcquire(ctx, ttl10s)
			require.NoError(t, err)
			assert.Equal(t, redlock.PermitKey("api", p.Slot()), p.Key())
			assert.Equal(t, "api", p.Name())
			slots[p.Slot()] = true
			held = append(held, p)
		}
		assert.Len(t, slots, 3, "each holder has its own slot")

		_, err = sem.TryAcquire(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		qe := quorumError(t, err)
		assert.Equal(t, "api", qe.Key)
		assert.Contains(t, err.Error(), "all 3 permits are taken")

		require.NoError(t, held[1].Release(ctx))
		p, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		assert.Equal(t, held[1].Slot(), p.Slot(), "the freed slot")
		held[1] = p
		for _, p := range held {
			require.NoError(t, p.Release(ctx))
		}
		synctest.Wait()
		assert.Zero(t, c.permitKeysLeft("api", 3))
	})
}

// A slot's token increases from holder to holder; Extend keeps the slot.
func TestSemaphore_TokensPerSlotIncrease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		sem, err := c.rl.Semaphore("api", 1)
		require.NoError(t, err)
		p, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		require.NotZero(t, p.Token())
		p2, err := p.Extend(ctx, 2*ttl10s)
		require.NoError(t, err)
		assert.Equal(t, p.Slot(), p2.Slot())
		assert.Equal(t, p.Token(), p2.Token())
		require.NoError(t, p2.Release(ctx))
		next, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		assert.Greater(t, next.Token(), p.Token())
		require.NoError(t, next.Release(ctx))
	})
}

// An expired permit frees its slot: the next holder takes it without any
// release.
func TestSemaphore_ExpiredPermitFreesItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		sem, err := c.rl.Semaphore("api", 2)
		require.NoError(t, err)
		a, err := sem.TryAcquire(ctx, time.Second)
		require.NoError(t, err)
		b, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		_, err = sem.TryAcquire(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		time.Sleep(time.Second + 10*time.Millisecond)
		p, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		assert.Equal(t, a.Slot(), p.Slot())
		require.NoError(t, p.Release(ctx))
		require.NoError(t, b.Release(ctx))
	})
}

// A waiting Acquire is woken by a release: it takes the freed permit right
// after the release, long before its retry delay would have ended.
func TestSemaphore_AcquireWokenOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		other := c.secondClient(t, noGuard)
		sem, err := c.rl.Semaphore("api", 2)
		require.NoError(t, err)
		osem, err := other.Semaphore("api", 2)
		require.NoError(t, err)
		a, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		b, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)

		var got *redlock.Permit
		var gotAt time.Time
		var wg sync.WaitGroup
		wg.Go(func() {
			p, err := osem.Acquire(ctx, ttl10s, redlock.WithRetry(redlock.LinearRetry(5*time.Second, 0, 0)))
			if assert.NoError(t, err) {
				got, gotAt = p, time.Now()
			}
		})
		time.Sleep(time.Second) // the waiter has subscribed
		released := time.Now()
		require.NoError(t, b.Release(ctx))
		wg.Wait()
		require.NotNil(t, got)
		assert.Equal(t, b.Slot(), got.Slot())
		assert.Equal(t, 2, got.Attempts(), "a round before the release, one after")
		assert.Less(t, gotAt.Sub(released), 100*time.Millisecond, "woken by the release, not by its 5 s retry delay")
		require.NoError(t, got.Release(ctx))
		require.NoError(t, a.Release(ctx))
	})
}

// With a majority of the nodes down, a permit fails with ErrNoQuorum, not
// ErrTaken; a cancelled wait fails with the context's error; neither leaves a
// key behind.
func TestSemaphore_ErrorsTellOutageFromBusyFromCancelled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		sem, err := c.rl.Semaphore("api", 2)
		require.NoError(t, err)
		a, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		b, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)

		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = sem.Acquire(cctx, ttl10s)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, a.Release(ctx))
		require.NoError(t, b.Release(ctx))
		synctest.Wait()
		assert.Zero(t, c.permitKeysLeft("api", 2))

		c.nodes[0].Refuse()
		c.nodes[1].Refuse()
		_, err = sem.TryAcquire(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		assert.NotErrorIs(t, err, redlock.ErrTaken)
		synctest.Wait()
		assert.Zero(t, c.permitKeysLeft("api", 2))
		c.endRedials(0, 1)
	})
}

// A slot that another owner holds on a majority, and one it holds on a
// minority only, with the majority split: the attempt on the split slot
// fails and is cleaned up, and no key of this caller is left.
func TestSemaphore_FailedRoundLeavesNoKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 5, noGuard)
		c.holdElsewhere(t, redlock.PermitKey("api", 0), ttl10s, 0, 1, 2)
		c.holdElsewhere(t, redlock.PermitKey("api", 1), ttl10s, 0, 1)
		c.holdElsewhere(t, redlock.PermitKey("api", 1), ttl10s, 3, 4) // a third owner elsewhere
		sem, err := c.rl.Semaphore("api", 2)
		require.NoError(t, err)
		_, err = sem.TryAcquire(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		synctest.Wait()
		for _, n := range c.nodes {
			for i := range 2 {
				k := redlock.PermitKey("api", i)
				if n.Has(k) {
					assert.Equal(t, "someone-else", n.Value(k))
				}
			}
		}
	})
}

// Do runs fn under a permit, with the slot's key and token in the Lease,
// releases it when fn returns, and passes fn's error on.
func TestSemaphore_Do(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		sem, err := c.rl.Semaphore("api", 2)
		require.NoError(t, err)
		boom := errors.New("boom")
		var key string
		err = sem.Do(ctx, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			key = lease.Key()
			require.NotZero(t, lease.Token())
			time.Sleep(2 * time.Second) // past the TTL: extended
			require.NoError(t, ctx.Err())
			return boom
		})
		require.ErrorIs(t, err, boom)
		assert.True(t, strings.HasPrefix(key, "{api}:permit:"), key)
		synctest.Wait()
		assert.Zero(t, c.permitKeysLeft("api", 2))

		// Both permits taken: Do with one round fails without running fn.
		a, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		b, err := sem.TryAcquire(ctx, ttl10s)
		require.NoError(t, err)
		ran := false
		err = sem.Do(ctx, ttl10s, func(context.Context, *redlock.Lease) error { ran = true; return nil }, redlock.WithRetry(redlock.NoRetry()))
		require.ErrorIs(t, err, redlock.ErrTaken)
		assert.False(t, ran)
		require.NoError(t, a.Release(ctx))
		require.NoError(t, b.Release(ctx))
	})
}

// A permit's lease ends its context when the permit is lost, with
// ErrLockLost as the cause, and Do returns it.
func TestSemaphore_DoEndsWhenThePermitIsLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		sem, err := c.rl.Semaphore("api", 1)
		require.NoError(t, err)
		err = sem.Do(ctx, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			for _, n := range c.nodes { // someone deletes the slot's key everywhere
				n.m.Del(lease.Key())
			}
			<-ctx.Done()
			return context.Cause(ctx)
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
	})
}

// Bad input gets ErrInvalidArgument (ErrClosed once closed), before any
// node is asked.
func TestSemaphore_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, noGuard)
		for _, tc := range []struct {
			name    string
			permits int
		}{{"api", 0}, {"api", -1}, {"api", redlock.MaxPermits + 1}, {"", 1}, {"a}b", 1}, {strings.Repeat("x", redlock.MaxKeyLen), 1}} {
			_, err := c.rl.Semaphore(tc.name, tc.permits)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, "%q %d", tc.name, tc.permits)
		}
		_, err := c.rl.Semaphore("api", 1, nil)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		sem, err := c.rl.Semaphore("api", 2)
		require.NoError(t, err)
		_, err = sem.TryAcquire(ctx, time.Millisecond)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = sem.Acquire(ctx, ttl10s, redlock.WithDriftFactor(2))
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		err = sem.Do(ctx, ttl10s, nil)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		err = sem.Do(ctx, ttl10s, func(context.Context, *redlock.Lease) error { return nil }, redlock.WithExtendInterval(ttl10s))
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		for _, n := range c.nodes {
			assert.Empty(t, n.m.Keys(), "nothing was sent")
		}
		require.NoError(t, c.rl.Close())
		_, err = sem.TryAcquire(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrClosed)
		_, err = c.rl.Semaphore("api", 1)
		require.ErrorIs(t, err, redlock.ErrClosed)
	})
}
