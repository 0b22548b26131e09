package redlock_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// A Lease's options (HoldOptions) act in every call that keeps a lock: the
// Lease extends every WithExtendInterval and ends at WithMaxHold, whether it
// comes from Lock.KeepAlive, MultiLock.KeepAlive, Do, Semaphore.Do, Campaign
// or Lead; and the Options given to the calls that also acquire (here
// WithKeyPrefix) still set the acquisition.
func TestHoldOptions_ActInEveryHolder(t *testing.T) {
	const (
		ttl      = time.Second // default interval ttl/3: one extension in 450 ms
		interval = 100 * time.Millisecond
		maxHold  = 450 * time.Millisecond
	)
	acquire := []redlock.Option{redlock.WithKeyPrefix("p:")}
	hold := []redlock.HoldOption{redlock.WithExtendInterval(interval), redlock.WithMaxHold(maxHold)}
	both := doOptions(acquire, hold...)
	// Each holder runs work under the hold, with the hold's context.
	holders := map[string]func(t *testing.T, c *cluster, work func(ctx context.Context)) error{
		"Lock.KeepAlive": func(t *testing.T, c *cluster, work func(ctx context.Context)) error {
			ctx := context.Background()
			l, err := c.rl.Acquire(ctx, "job", ttl, acquire...)
			require.NoError(t, err)
			lease, err := l.KeepAlive(ctx, hold...)
			require.NoError(t, err)
			work(lease.Context())
			return lease.Release(ctx)
		},
		"MultiLock.KeepAlive": func(t *testing.T, c *cluster, work func(ctx context.Context)) error {
			ctx := context.Background()
			m, err := c.rl.AcquireMulti(ctx, []string{"a", "b"}, ttl, acquire...)
			require.NoError(t, err)
			lease, err := m.KeepAlive(ctx, hold...)
			require.NoError(t, err)
			work(lease.Context())
			return lease.Release(ctx)
		},
		"Do": func(t *testing.T, c *cluster, work func(ctx context.Context)) error {
			return c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, _ *redlock.Lease) error {
				work(ctx)
				return nil
			}, both...)
		},
		"Semaphore.Do": func(t *testing.T, c *cluster, work func(ctx context.Context)) error {
			sem, err := c.rl.Semaphore("sem", 2)
			require.NoError(t, err)
			return sem.Do(context.Background(), ttl, func(ctx context.Context, _ *redlock.Lease) error {
				work(ctx)
				return nil
			}, both...)
		},
		"Campaign": func(t *testing.T, c *cluster, work func(ctx context.Context)) error {
			ctx := context.Background()
			l, err := c.rl.Campaign(ctx, "e", "a", ttl, both...)
			require.NoError(t, err)
			work(l.Context())
			return l.Resign(ctx)
		},
		"Lead": func(t *testing.T, c *cluster, work func(ctx context.Context)) error {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			err := c.rl.Lead(ctx, "e", "a", ttl, func(lctx context.Context, _ *redlock.Leadership) error {
				work(lctx)
				cancel() // one term: Lead would campaign again after the hold limit
				return nil
			}, both...)
			require.ErrorIs(t, err, context.Canceled)
			return nil
		},
	}
	for name, holder := range holders {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ev := &eventLog{}
				c := newCluster(t, 3, redlock.WithObserver(ev))
				var (
					held, ended time.Time
					cause       error
					prefixed    bool
				)
				err := holder(t, c, func(ctx context.Context) {
					held = time.Now()
					for _, k := range c.nodes[0].m.Keys() {
						prefixed = prefixed || strings.HasPrefix(k, "p:") || strings.HasPrefix(k, "{p:")
					}
					select {
					case <-ctx.Done():
					case <-time.After(10 * time.Second): // the limit was ignored
					}
					ended, cause = time.Now(), context.Cause(ctx)
				})
				if name == "Do" || name == "Semaphore.Do" {
					require.ErrorIs(t, err, redlock.ErrHoldLimit)
				} else {
					require.NoError(t, err)
				}
				assert.True(t, prefixed, "the Option set the acquisition's key")
				require.ErrorIs(t, cause, redlock.ErrHoldLimit)
				assert.Equal(t, maxHold, ended.Sub(held), "WithMaxHold ended the hold")
				n, ok := ev.count(redlock.OpExtend)
				assert.Equal(t, 4, n, "WithExtendInterval: extensions at 100, 200, 300 and 400 ms")
				assert.Equal(t, 4, ok)
			})
		})
	}
}

// A nested Lease (Do in Do, KeepAlive of a reentrant handle) does not extend
// or release, but its WithMaxHold still ends its own context at the limit,
// with ErrHoldLimit, while the outer Lease goes on holding the lock.
func TestHoldOptions_MaxHoldOfANestedLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		const limit = 500 * time.Millisecond
		err := c.rl.Do(context.Background(), "job", time.Second, func(ctx context.Context, outer *redlock.Lease) error {
			start := time.Now()
			var innerEnd time.Time
			err := c.rl.Do(ctx, "job", time.Second, func(ictx context.Context, _ *redlock.Lease) error {
				select {
				case <-ictx.Done():
				case <-time.After(5 * time.Second): // the limit was ignored
				}
				innerEnd = time.Now()
				return nil
			}, redlock.WithMaxHold(limit))
			require.ErrorIs(t, err, redlock.ErrHoldLimit)
			assert.Equal(t, limit, innerEnd.Sub(start))

			l := c.acquire(t, ctx, "job", time.Second) // nested
			lease, err := l.KeepAlive(ctx, redlock.WithMaxHold(limit))
			require.NoError(t, err)
			select {
			case <-lease.Done():
			case <-time.After(5 * time.Second): // the limit was ignored
			}
			require.ErrorIs(t, lease.Err(), redlock.ErrHoldLimit)
			require.NoError(t, lease.Release(ctx))

			time.Sleep(time.Second) // the outer Lease extends past the TTL
			require.NoError(t, outer.Err())
			assert.Equal(t, 3, c.holders("job"))
			return nil
		})
		require.NoError(t, err)
		c.requireGone(t, "job")
	})
}
