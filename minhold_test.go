package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// takenUntil requires key to be taken for another client at the instant
// before end and free at the instant after (end is fake time in a bubble):
// the lock's keys expired exactly at end.
func takenUntil(t *testing.T, other *redlock.Client, key string, end time.Time) {
	t.Helper()
	ctx := context.Background()
	time.Sleep(time.Until(end) - time.Millisecond)
	_, err := other.TryAcquire(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrTaken, "1 ms before the end of the hold")
	time.Sleep(2 * time.Millisecond)
	l, err := other.TryAcquire(ctx, key, time.Second)
	require.NoError(t, err, "1 ms after the end of the hold")
	require.NoError(t, l.Release(ctx))
}

// A Release within the minimum hold leaves the lock taken until the hold's
// end, counted from the grant, and returns at once; with the amnesia guard
// on (the release's write-back) as with it off.
func TestMinHold_ReleaseLeavesTheLockTakenUntilTheEnd(t *testing.T) {
	for _, guard := range []time.Duration{0, time.Minute} {
		t.Run("quarantine "+guard.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				guardOpt := redlock.WithQuarantine(guard)
				if guard == 0 {
					guardOpt = redlock.WithoutAmnesiaGuard()
				}
				c := newWarmCluster(t, 3, guardOpt)
				other := c.secondClient(t, guardOpt)
				ctx := context.Background()
				l := c.acquireSettled(t, ctx, "tick", 10*time.Second, redlock.WithMinHold(3*time.Second))
				time.Sleep(time.Second) // the job: shorter than the hold

				before := time.Now()
				require.NoError(t, l.Release(ctx))
				assert.Equal(t, before, time.Now(), "Release does not wait for the hold")
				assert.LessOrEqual(t, l.Validity(), time.Duration(0), "the holder must not trust a released lock")
				synctest.Wait()
				assert.Equal(t, 3, c.holders("tick"), "every node keeps the key")

				takenUntil(t, other, "tick", l.AcquiredAt().Add(3*time.Second))
			})
		})
	}
}

// Past the hold, Release deletes the keys as without one.
func TestMinHold_PassedHoldDeletesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		ctx := context.Background()
		l := c.acquireSettled(t, ctx, "tick", 10*time.Second, redlock.WithMinHold(time.Second))
		time.Sleep(2 * time.Second) // the job: longer than the hold
		c.releaseAndRequireGone(t, ctx, l, "tick")
	})
}

// The hold counts from the acquisition, not from the extensions a Lease
// made since: a job kept alive past two extensions and released before the
// hold's end holds until acquisition + hold.
func TestMinHold_CountsFromTheGrantNotFromExtensions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		other := c.secondClient(t)
		ctx := context.Background()
		l := c.acquireSettled(t, ctx, "tick", 3*time.Second, redlock.WithMinHold(2500*time.Millisecond))
		lease, err := l.KeepAlive(ctx, redlock.WithExtendInterval(time.Second))
		require.NoError(t, err)
		time.Sleep(2200 * time.Millisecond)
		require.True(t, lease.Lock().AcquiredAt().After(l.AcquiredAt()), "the lease extended the lock")
		require.NoError(t, lease.Release(ctx))
		takenUntil(t, other, "tick", l.AcquiredAt().Add(2500*time.Millisecond))
	})
}

// The hold never keeps the keys past the lock's validity: an acquisition
// that took 100 ms leaves a 1 s lock valid until 988 ms after its start
// (1 s − 12 ms drift), and a 1 s hold counted from the grant (at 100 ms)
// ends there, not at 1.1 s.
func TestMinHold_NeverPastTheValidity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		other := c.secondClient(t)
		ctx := context.Background()
		for _, n := range c.nodes {
			n.SlowAcquire(100 * time.Millisecond)
		}
		l := c.acquireSettled(t, ctx, "tick", time.Second, redlock.WithMinHold(time.Second))
		for _, n := range c.nodes {
			n.SlowAcquire(0)
		}
		require.Less(t, l.ValidUntil(), l.AcquiredAt().Add(time.Second), "the set-up: the hold would end after the validity")
		time.Sleep(100 * time.Millisecond)
		require.NoError(t, l.Release(ctx))
		takenUntil(t, other, "tick", l.ValidUntil())
	})
}

// Do with a minimum hold: the function's quick return does not free the
// lock before the hold's end.
func TestMinHold_Do(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		other := c.secondClient(t)
		ctx := context.Background()
		var granted time.Time
		err := c.rl.Do(ctx, "tick", 5*time.Second, func(context.Context, *redlock.Lease) error {
			granted = time.Now()
			return nil
		}, redlock.WithMinHold(2*time.Second))
		require.NoError(t, err)
		takenUntil(t, other, "tick", granted.Add(2*time.Second))
	})
}

// The hold shortens only keys that hold this lock's owner value: where
// another owner holds the key, Release reports it (ErrNotHeld) and leaves
// that key and its TTL alone.
func TestMinHold_LeavesOtherOwnersKeysAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		ctx := context.Background()
		l := c.acquireSettled(t, ctx, "tick", 10*time.Second, redlock.WithMinHold(5*time.Second))
		c.holdElsewhere(t, "tick", 8*time.Second, 0, 1)
		err := l.Release(ctx)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		synctest.Wait()
		for _, i := range []int{0, 1} {
			assert.Equal(t, "someone-else", c.nodes[i].Value("tick"))
			assert.Equal(t, 8*time.Second, c.nodes[i].m.TTL("tick"), "node %d: another owner's TTL must not change", i)
		}
		assert.Equal(t, l.Owner(), c.nodes[2].Value("tick"), "our key on node 2 is held until the hold's end")
		time.Sleep(5 * time.Second)
		assert.False(t, c.nodes[2].Has("tick"), "and then expires")
	})
}

// A waiting Acquire gets the lock once the hold ends, though no release
// message comes: it finds the key gone at its next retry.
func TestMinHold_WaiterGetsTheLockAfterTheHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3)
		other := c.secondClient(t)
		ctx := context.Background()
		l := c.acquireSettled(t, ctx, "tick", 10*time.Second, redlock.WithMinHold(2*time.Second))
		end := l.AcquiredAt().Add(2 * time.Second)
		got := make(chan time.Time, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			w, err := other.Acquire(wctx, "tick", time.Second)
			if !assert.NoError(t, err) {
				got <- time.Time{}
				return
			}
			got <- time.Now()
			assert.NoError(t, w.Release(ctx))
		}()
		time.Sleep(500 * time.Millisecond) // the waiter is waiting
		require.NoError(t, l.Release(ctx))
		at := <-got
		assert.False(t, at.Before(end), "the waiter got the lock %v before the hold's end", end.Sub(at))
	})
}

// Bad holds are refused before any node is asked, with ErrInvalidArgument:
// a negative one by the option, one longer than the TTL by every call that
// takes a TTL. A hold equal to the TTL is fine.
func TestMinHold_Invalid(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		_, err := c.rl.Acquire(ctx, "k", time.Second, redlock.WithMinHold(-time.Millisecond))
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		require.ErrorContains(t, err, "must not be negative")

		long := redlock.WithMinHold(time.Second + time.Millisecond)
		_, err = c.rl.TryAcquire(ctx, "k", time.Second, long)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		require.ErrorContains(t, err, "longer than the ttl")
		ran := false
		err = c.rl.Do(ctx, "k", time.Second, func(context.Context, *redlock.Lease) error { ran = true; return nil }, long)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.False(t, ran)
		require.ErrorIs(t, redlock.CheckTTL(time.Second, long), redlock.ErrInvalidArgument)
		_, err = redlock.New(nil, redlock.WithMinHold(-1))
		require.True(t, errors.Is(err, redlock.ErrInvalidArgument))
		c.requireNoKey(t, "k") // the refused calls asked no node

		require.NoError(t, redlock.CheckTTL(time.Second, redlock.WithMinHold(time.Second)))
		l := c.tryAcquire(t, ctx, "k", time.Second, redlock.WithMinHold(time.Second))
		require.NoError(t, l.Release(ctx))
	})
}

// With the amnesia guard on, the hold does the release's write-back where
// it finds our key (as releaseVouchScript where it deletes it): a node whose
// vouching write failed is vouched for by the release, and its epoch is
// trusted, as after a release without a hold.
func TestMinHold_VouchesAsTheReleaseWould(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, redlock.WithQuarantine(time.Minute))
		c.nodes[2].FailIf(func(cmd string, args []string) bool { return isScript("fence", cmd, args) })
		l := c.acquireSettled(t, ctx, "report", 10*time.Second, redlock.WithMinHold(5*time.Second))
		require.Empty(t, c.nodes[2].m.HGet("{report}:epoch", "trusted"), "the set-up: node 2 was not vouched for")
		c.nodes[2].FailIf(nil)
		require.NoError(t, l.Release(ctx))
		synctest.Wait()
		require.True(t, c.nodes[2].Has("report"), "held until the hold's end")
		assert.Equal(t, "1", c.nodes[2].m.HGet("{report}:epoch", "trusted"))
	})
}
