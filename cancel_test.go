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
