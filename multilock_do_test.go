package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
)

// DoMulti holds every key while fn runs, extends them all (fn outlives the
// TTL many times), gives fn each key's token, returns fn's error, and
// leaves no key and no goroutine behind once the Client is closed.
func TestDoMulti_HoldsEveryKeyWhileFnRuns(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		base := goleak.IgnoreCurrent()
		ctx := context.Background()
		single := c.acquire(t, ctx, "b", 10*time.Second)
		require.NoError(t, single.Release(ctx))
		synctest.Wait()
		errWork := errors.New("work done, with an error")
		err := c.rl.DoMulti(ctx, []string{"a", "b"}, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			m := lease.MultiLock()
			require.NotNil(t, m)
			tb, ok := m.Token("b")
			require.True(t, ok)
			assert.Greater(t, tb, single.Token(), "b's token follows its single-key holder's")
			ta, _ := m.Token("a")
			assert.Equal(t, ta, lease.Token(), "the Lease's token is the first key's")
			for range 10 {
				time.Sleep(time.Second) // ten TTLs: the extensions keep every key
				require.NoError(t, ctx.Err())
				c.requireMultiHeld(t, m.Owner(), "a", "b")
			}
			_, err := c.rl.TryAcquire(ctx, "b", time.Second)
			assert.ErrorIs(t, err, redlock.ErrTaken, "b is held")
			return errWork
		})
		assert.Equal(t, errWork, err)
		c.requireGone(t, "a")
		c.requireGone(t, "b")
		require.NoError(t, c.rl.Close())
		lc.verifyNone(t, base)
	})
}

// The Lease of DoMulti ends when the nodes lose the keys: fn's context ends
// with ErrLockLost, DoMulti returns that and fn's error, and neither a key
// (the node that kept them is released) nor a goroutine is left. A
// minority losing them changes nothing.
func TestDoMulti_LeaseEndsWhenTheNodesLoseTheKeys(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		base := goleak.IgnoreCurrent()
		ctx := context.Background()
		err := c.rl.DoMulti(ctx, []string{"a", "b"}, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			c.nodes[0].m.Del("b") // a minority loses a key
			time.Sleep(2 * time.Second)
			require.NoError(t, ctx.Err(), "a majority still holds every key")
			c.nodes[1].m.Del("a") // now a majority misses one
			<-ctx.Done()
			assert.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
			assert.LessOrEqual(t, lease.Validity(), time.Duration(0))
			return errors.New("work interrupted")
		})
		assert.ErrorIs(t, err, redlock.ErrLockLost)
		assert.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, "work interrupted")
		c.requireGone(t, "a")
		c.requireGone(t, "b")
		require.NoError(t, c.rl.Close())
		lc.verifyNone(t, base)
	})
}

// DoMulti refuses bad input before any node is asked, and returns
// AcquireMulti's error without running fn when a key is held.
func TestDoMulti_Errors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		ran := false
		fn := func(context.Context, *redlock.Lease) error { ran = true; return nil }
		for name, err := range map[string]error{
			"nil fn":       c.rl.DoMulti(ctx, []string{"a", "b"}, time.Second, nil),
			"no keys":      c.rl.DoMulti(ctx, nil, time.Second, fn),
			"repeated key": c.rl.DoMulti(ctx, []string{"a", "a"}, time.Second, fn),
			"bad ttl":      c.rl.DoMulti(ctx, []string{"a", "b"}, 0, fn),
			"interval":     c.rl.DoMulti(ctx, []string{"a", "b"}, time.Second, fn, redlock.WithExtendInterval(time.Second)),
		} {
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		}
		c.holdElsewhere(t, "b", time.Minute, 0, 1, 2)
		err := c.rl.DoMulti(ctx, []string{"a", "b"}, time.Second, fn, redlock.WithRetry(redlock.NoRetry()))
		require.ErrorIs(t, err, redlock.ErrTaken)
		var kt *redlock.KeysTakenError
		require.ErrorAs(t, err, &kt)
		assert.False(t, ran, "fn ran without the keys")
		c.requireGone(t, "a")
	})
}

// A multi-key lock's Lease context holds none of its keys for Acquire, not
// even the first (whose name the Lease shares): an Acquire of one of them
// with it contends, and finds it taken.
func TestDoMulti_NotReentrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		err := c.rl.DoMulti(ctx, []string{"a", "b"}, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			for _, k := range []string{"a", "b"} {
				_, err := c.rl.TryAcquire(ctx, k, time.Second)
				assert.ErrorIs(t, err, redlock.ErrTaken, "key %s", k)
			}
			return nil
		})
		require.NoError(t, err)
		c.requireGone(t, "a")
	})
}
