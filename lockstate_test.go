package redlock_test

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

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
						return failed && (isScript("release", cmd, args) || isScript("release-vouch", cmd, args))
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

// One Lock, Extend and Release called on it from many goroutines at once.
// Property, over generated schedules on 3 nodes (how many of each call, how
// long each node takes to run an extension and a delete, when the Releases
// start): exactly one Release returns nil (it deleted the key: no fault
// stops it) and the others ErrNotHeld; an Extend succeeds exactly when it
// returned before the first Release began (the times are fake and never
// equal); no handle of the lock reports validity afterwards; no node holds
// the key once every call has ended.
func TestLock_ConcurrentReleaseAndExtend(t *testing.T) {
	setRapidChecks(t, 30) // each schedule starts a cluster; a broken lock fails the first few
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			ctx := context.Background()
			c := newWarmCluster(rt, 3)
			l, err := c.rl.TryAcquire(ctx, "job", ttl10s)
			require.NoError(rt, err)
			synctest.Wait()
			delays := []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond}
			for i, nd := range c.nodes {
				ext := rapid.SampledFrom(delays).Draw(rt, fmt.Sprintf("node %d extend delay", i))
				rel := rapid.SampledFrom(delays).Draw(rt, fmt.Sprintf("node %d release delay", i))
				nd.mu.Lock()
				nd.delay = func(cmd string, args []string) time.Duration {
					switch {
					case isScript("extend", cmd, args):
						return ext
					case isScript("release", cmd, args):
						return rel
					}
					return 0
				}
				nd.mu.Unlock()
			}
			extends := rapid.IntRange(1, 25).Draw(rt, "extends")
			releases := rapid.IntRange(1, 25).Draw(rt, "releases")
			releaseAt := rapid.SampledFrom([]time.Duration{500 * time.Microsecond, 2500 * time.Microsecond, 7500 * time.Microsecond, 12500 * time.Microsecond}).Draw(rt, "releases start after")

			start := time.Now()
			type extended struct {
				l   *redlock.Lock
				err error
				at  time.Duration
			}
			ext := make([]extended, extends)
			rel := make([]error, releases)
			var wg sync.WaitGroup
			for i := range ext {
				wg.Go(func() {
					nl, err := l.Extend(ctx, ttl10s)
					ext[i] = extended{nl, err, time.Since(start)}
				})
			}
			for i := range rel {
				wg.Go(func() {
					time.Sleep(releaseAt)
					rel[i] = l.Release(ctx)
				})
			}
			wg.Wait()
			synctest.Wait()

			ok := 0
			for i, err := range rel {
				if err == nil {
					ok++
					continue
				}
				require.ErrorIs(rt, err, redlock.ErrNotHeld, "release %d", i)
			}
			require.Equal(rt, 1, ok, "Releases that returned nil")
			for i, e := range ext {
				if e.at < releaseAt {
					require.NoError(rt, e.err, "extend %d returned at %v, before the first Release began", i, e.at)
				} else {
					require.ErrorIs(rt, e.err, redlock.ErrNotHeld, "extend %d returned at %v, after the first Release began at %v", i, e.at, releaseAt)
				}
				if e.l != nil {
					require.LessOrEqual(rt, e.l.Validity(), time.Duration(0), "extend %d's handle of the released lock", i)
				}
			}
			require.LessOrEqual(rt, l.Validity(), time.Duration(0))
			time.Sleep(time.Second) // the deletes Release did not wait for
			synctest.Wait()
			for i, nd := range c.nodes {
				require.False(rt, nd.Has("job"), "node %d still holds the key", i)
			}
		})
	})
}

// setRapidChecks makes rapid.Check try n examples in this test (the flag
// -rapid.checks, restored at the end).
func setRapidChecks(t *testing.T, n int) {
	checks := flag.Lookup("rapid.checks")
	old := checks.Value.String()
	require.NoError(t, checks.Value.Set(strconv.Itoa(n)))
	t.Cleanup(func() { _ = checks.Value.Set(old) })
}
