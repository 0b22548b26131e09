package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// TestAcquire_CanceledReturnsAtOnceAndClean: every node runs the SET at once
// and answers 70 ms later; the caller cancels at 30 ms. Acquire (and Do)
// return within a few ms of the cancel, not once the replies and the
// clean-up have come back, and every grant is deleted as its reply arrives:
// once the replies are in, no node holds the key.
func TestAcquire_CanceledReturnsAtOnceAndClean(t *testing.T) {
	for _, dial := range []bool{false, true} {
		for _, do := range []bool{false, true} {
			t.Run(fmt.Sprintf("dial=%v/do=%v", dial, do), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					nodes, rl := lateCluster(t, dial)
					for _, nd := range nodes {
						nd.DelayReplies(70 * time.Millisecond)
					}
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(30*time.Millisecond, cancel)
					start := time.Now()
					var err error
					if do {
						err = rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { return nil })
					} else {
						_, err = rl.Acquire(ctx, "job", time.Second)
					}
					took := time.Since(start)
					t.Logf("took %v: %v", took, err)
					require.ErrorIs(t, err, redlock.ErrNotAcquired)
					require.ErrorIs(t, err, context.Canceled)
					assert.LessOrEqual(t, took, 35*time.Millisecond, "returned %v after the cancel", took-30*time.Millisecond)
					time.Sleep(time.Second) // every late reply, and the deletes they start
					synctest.Wait()
					for i, nd := range nodes {
						assert.False(t, nd.Has("job"), "node %d still holds the key (ttl %v)", i, nd.m.TTL("job"))
					}
				})
			})
		}
	}
}

// A waiter of the holder's own Client gives up just as the holder releases
// (its context ends at the same instant): the release may tell it, the
// longest waiter, of the release, a hand-off to nobody. Once it has
// returned and its late replies are in, it holds no key, and the holder's next Acquire of the free key
// (100 ms deadline) takes it with its first attempt, round after round.
func TestAcquire_HandOffAbortedAtTheReleaseCostsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		for round := range 20 {
			held, err := c.rl.TryAcquire(ctx, "job", time.Minute)
			require.NoError(t, err, "round %d", round)
			wctx, cancel := context.WithCancel(ctx)
			type result struct {
				l   *redlock.Lock
				err error
			}
			gaveUp := make(chan result, 1)
			go func() {
				l, err := c.rl.Acquire(wctx, "job", time.Minute)
				gaveUp <- result{l, err}
			}()
			time.Sleep(time.Second)
			synctest.Wait()
			released := make(chan error, 1)
			go func() { released <- held.Release(ctx) }()
			cancel()
			r := <-gaveUp
			require.NoError(t, <-released, "round %d", round)
			if r.err == nil {
				require.NoError(t, r.l.Release(ctx), "round %d: the waiter won before its cancel", round)
			} else {
				require.ErrorIs(t, r.err, context.Canceled, "round %d", round)
				// A grant whose reply was still on its way when Acquire
				// returned (after its cancelGrace) is deleted as it arrives:
				// judge the nodes once the replies are in.
				synctest.Wait()
				for i, n := range c.nodes {
					// The holder's own key may still be there: Release
					// returned once a majority deleted it.
					if v := n.Value("job"); v != "" && v != held.Owner() {
						t.Errorf("round %d: node %d holds the key of the waiter that gave up: %q", round, i, v)
					}
				}
			}

			actx, acancel := context.WithTimeout(ctx, 100*time.Millisecond)
			l, err := c.rl.Acquire(actx, "job", time.Minute)
			acancel()
			require.NoError(t, err, "round %d: the key is free", round)
			require.Equal(t, 1, l.Attempts(), "round %d: taken by the first attempt", round)
			require.NoError(t, l.Release(ctx), "round %d", round)
			synctest.Wait()
		}
	})
}
