package redlock_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// Extend refuses, without a round trip, a lock whose Validity is no longer
// positive because it was released, even while its deadline is ahead and
// its keys are still on a majority (here the deletes failed): a released
// handle is never revived. The same holds for a failed Release, whose caller
// gave the lock up.
func TestExtend_RefusesAReleasedLockWithoutARoundTrip(t *testing.T) {
	ctx := context.Background()
	for _, failed := range []bool{false, true} {
		t.Run(fmt.Sprint("release failed=", failed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 3)
				l := c.acquireSettled(t, ctx, "job", ttl10s)
				var extends atomic.Int32
				for _, nd := range c.nodes {
					nd.FailIf(func(cmd string, args []string) bool {
						if isScript("extend", cmd, args) {
							extends.Add(1)
						}
						return failed && isScript("release", cmd, args)
					})
				}
				err := l.Release(ctx)
				if failed {
					require.ErrorIs(t, err, redlock.ErrNoQuorum)
					require.Equal(t, 3, c.holders("job"), "the keys are still there")
				} else {
					require.NoError(t, err)
				}
				require.True(t, time.Now().Before(l.ValidUntil()), "the deadline is still ahead")
				_, err = l.Extend(ctx, ttl10s)
				require.ErrorIs(t, err, redlock.ErrNotHeld)
				synctest.Wait()
				assert.Zero(t, extends.Load(), "no extension was sent")
				if failed {
					assert.Equal(t, 3, c.holders("job"))
					for _, nd := range c.nodes {
						assert.LessOrEqual(t, nd.m.TTL("job"), ttl10s, "no key was lengthened")
					}
				}
			})
		})
	}
}
