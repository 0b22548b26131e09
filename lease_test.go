package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// What the work under Do sees of its lock: the Lease Do hands it, and a
// reentrant handle taken with Do's context. Invariant: while the lock is
// kept alive, both report a positive validity that moves forward with every
// extension and the same fencing token; once it is lost, both report none,
// and the Lease says why, as context.Cause does.

func TestDo_LeaseFollowsEveryExtension(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		const ttl = 2 * time.Second
		var deadlines []time.Time // each distinct ValidUntil seen, in order
		err := c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, lease *redlock.Lease) error {
			nested := c.acquire(t, ctx, "job", ttl)
			assert.Equal(t, "job", lease.Key())
			assert.NotZero(t, lease.Token())
			assert.Equal(t, lease.Token(), nested.Token())
			assert.Equal(t, lease.Lock().Token(), lease.Token())
			deadlines = append(deadlines, lease.ValidUntil())
			// 7 s of work under a 2 s TTL: the work checks Validity, as
			// the README says, at every step.
			for range 70 {
				time.Sleep(100 * time.Millisecond)
				if lease.Validity() <= 0 || nested.Validity() <= 0 {
					return fmt.Errorf("at %v: lease validity %v, nested %v", time.Since(deadlines[0].Add(-ttl)), lease.Validity(), nested.Validity())
				}
				v := lease.ValidUntil()
				assert.Equal(t, v, lease.Lock().ValidUntil(), "the Lease's deadline is its latest handle's")
				assert.Equal(t, v, nested.ValidUntil(), "a nested handle reports the Lease's deadline")
				assert.Equal(t, time.Until(v), lease.Validity())
				assert.Equal(t, lease.Validity(), nested.Validity())
				if last := deadlines[len(deadlines)-1]; !v.Equal(last) {
					assert.True(t, v.After(last), "the deadline moves forward")
					deadlines = append(deadlines, v)
				}
			}
			// A nested handle extends the shared lock past the first
			// grant's deadline.
			_, err := nested.Extend(ctx, ttl)
			return err
		})
		require.NoError(t, err)
		_, extOK := ev.count(redlock.OpExtend)
		assert.GreaterOrEqual(t, extOK, 10, "one extension every TTL/3 for 7 s")
		assert.Equal(t, extOK-1, len(deadlines)-1, "every extension but the nested one moved the Lease's deadline")
	})
}

func TestDo_LeaseAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		const ttl = time.Second
		err := c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, lease *redlock.Lease) error {
			nested := c.acquire(t, ctx, "job", ttl)
			assert.NoError(t, lease.Err(), "live")
			time.Sleep(2 * ttl) // a few extensions
			c.nodes[0].Refuse()
			c.nodes[1].Refuse()
			<-lease.Done()
			assert.Same(t, context.Cause(ctx), lease.Err(), "Err is the context's cause")
			assert.ErrorIs(t, lease.Err(), redlock.ErrLockLost)
			assert.True(t, lease.ValidUntil().After(time.Now()), "the deadline stays; the validity does not")
			assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
			assert.LessOrEqual(t, nested.Validity(), time.Duration(0))
			return nil
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)
		settleDials()
	})
}

func TestDo_LeaseAtHoldLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		err := c.rl.Do(context.Background(), "job", time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			nested := c.acquire(t, ctx, "job", time.Second)
			<-ctx.Done()
			assert.ErrorIs(t, lease.Err(), redlock.ErrHoldLimit)
			assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
			assert.LessOrEqual(t, nested.Validity(), time.Duration(0))
			return nil
		}, redlock.WithMaxHold(1500*time.Millisecond))
		require.ErrorIs(t, err, redlock.ErrHoldLimit)

		// KeepAlive leaves the keys to expire at the hold limit: the lock
		// is not released, but the Lease no longer vouches for it.
		ctx := context.Background()
		lock := c.acquire(t, ctx, "job", time.Second)
		lease, err := lock.KeepAlive(ctx, redlock.WithMaxHold(1500*time.Millisecond))
		require.NoError(t, err)
		<-lease.Done()
		assert.ErrorIs(t, lease.Err(), redlock.ErrHoldLimit)
		assert.Positive(t, lease.Lock().Validity(), "the latest handle is still valid")
		assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
		require.NoError(t, lease.Release(ctx))
	})
}

// A nested handle taken under KeepAlive, and one under a nested Lease (Do in
// Do), follow the outermost Lease too.
func TestKeepAlive_NestedHandleFollowsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		const ttl = time.Second
		lease, err := c.acquire(t, ctx, "job", ttl).KeepAlive(ctx)
		require.NoError(t, err)
		nested := c.acquire(t, lease.Context(), "job", ttl)
		first := nested.ValidUntil()

		var inner *redlock.Lock
		require.NoError(t, c.rl.Do(lease.Context(), "job", ttl, func(ctx context.Context, innerLease *redlock.Lease) error {
			inner = c.acquire(t, ctx, "job", ttl)
			time.Sleep(3 * ttl)
			assert.Equal(t, lease.ValidUntil(), innerLease.ValidUntil(), "a nested Lease reports the outer one's")
			assert.Equal(t, lease.Validity(), innerLease.Validity())
			assert.Equal(t, lease.Token(), innerLease.Token())
			return nil
		}))
		assert.True(t, lease.ValidUntil().After(first.Add(2*ttl)), "extended for 3 TTLs")
		for _, l := range []*redlock.Lock{nested, inner} {
			assert.Equal(t, lease.ValidUntil(), l.ValidUntil())
			assert.Positive(t, l.Validity())
		}
		require.NoError(t, lease.Release(ctx))
		assert.LessOrEqual(t, nested.Validity(), time.Duration(0))
		assert.LessOrEqual(t, inner.Validity(), time.Duration(0))
	})
}

// When fn passes the loss on (context.Cause, or wrapped), Do's error says it
// once, and still matches the loss and fn's error.
func TestDo_LossSaidOnce(t *testing.T) {
	for name, pass := range map[string]func(ctx context.Context) error{
		"cause":   context.Cause,
		"wrapped": func(ctx context.Context) error { return fmt.Errorf("rendering page 3: %w", context.Cause(ctx)) },
		"ctx.Err": func(ctx context.Context) error { return ctx.Err() },
		"own":     func(context.Context) error { return errors.New("work interrupted") },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 3)
				var fnErr, cause error
				err := c.rl.Do(context.Background(), "job", time.Second, func(ctx context.Context, lease *redlock.Lease) error {
					c.nodes[0].Refuse()
					c.nodes[1].Refuse()
					<-ctx.Done()
					cause, fnErr = lease.Err(), pass(ctx)
					return fnErr
				})
				require.ErrorIs(t, err, redlock.ErrLockLost)
				assert.ErrorIs(t, err, fnErr)
				assert.Equal(t, 1, strings.Count(err.Error(), cause.Error()), "the loss is said once: %v", err)
				settleDials()
			})
		})
	}
}
