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
	"github.com/d3b93e30/redlock/fencing"
)

// rwKeysLeft counts, on every node, the read/write lock name's keys that
// hold a holder or a waiting writer: the writer key, the readers and the
// waiting writers (the counter and the epoch stay for the retention, as a
// mutex's do).
func (c *cluster) rwKeysLeft(name string) int {
	return c.holders(name) + c.holders(redlock.RWReadersKey(name)) + c.holders(redlock.RWWritersKey(name))
}

// Many readers at once; a writer is refused while they hold, and readers
// while it holds; its token is above the readers', whose token is the last
// writer's. Nothing is left once every holder released.
func TestRWMutex_ReadersShareWriterExcludes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 5)
		rw, err := c.rl.RWMutex("cache")
		require.NoError(t, err)
		assert.Equal(t, "cache", rw.Name())

		w0, err := rw.TryLock(ctx, ttl10s)
		require.NoError(t, err)
		assert.False(t, w0.Shared())
		assert.Equal(t, "cache", w0.Key())
		require.NoError(t, w0.Release(ctx))

		var readers []*redlock.RWLock
		for range 3 {
			r, err := rw.TryRLock(ctx, ttl10s)
			require.NoError(t, err)
			assert.True(t, r.Shared())
			assert.Equal(t, w0.Token(), r.Token(), "a reader carries the last writer's token")
			assert.Positive(t, r.Validity())
			readers = append(readers, r)
		}
		_, err = rw.TryLock(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		assert.Contains(t, err.Error(), "3 readers hold it")
		assert.Equal(t, "cache", quorumError(t, err).Key)

		for _, r := range readers {
			require.NoError(t, r.Release(ctx))
		}
		w1, err := rw.TryLock(ctx, ttl10s)
		require.NoError(t, err)
		assert.Greater(t, w1.Token(), readers[0].Token(), "a writer's token is above every earlier reader's")
		_, err = rw.TryRLock(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		assert.Contains(t, err.Error(), "a writer holds it")
		_, err = rw.TryLock(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		require.NoError(t, w1.Release(ctx))

		r, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err)
		assert.Equal(t, w1.Token(), r.Token())
		require.NoError(t, r.Release(ctx))
		require.ErrorIs(t, r.Release(ctx), redlock.ErrNotHeld, "a second release has nothing to delete")
		synctest.Wait()
		assert.Zero(t, c.rwKeysLeft("cache"))
	})
}

// A waiting writer blocks new readers (it is not starved by them); the
// readers that hold keep holding and may extend; the writer gets the lock
// when the last of them releases, and drops its intent.
func TestRWMutex_WaitingWriterBlocksNewReaders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		rw, err := c.rl.RWMutex("schema")
		require.NoError(t, err)
		r1, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err)

		type result struct {
			w   *redlock.RWLock
			err error
		}
		got := make(chan result, 1)
		go func() { // it reports to the test, which may have ended when Lock returns
			w, err := rw.Lock(ctx, ttl10s)
			got <- result{w, err}
		}()
		time.Sleep(50 * time.Millisecond) // the writer's first attempt posts its intent
		synctest.Wait()
		_, err = rw.TryRLock(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken, "a new reader waits behind the waiting writer")
		assert.Contains(t, err.Error(), "1 writers wait")

		r1, err = r1.Extend(ctx, ttl10s)
		require.NoError(t, err, "a reader that holds may extend while a writer waits")
		require.NoError(t, r1.Release(ctx))
		res := <-got
		require.NoError(t, res.err)
		w := res.w
		assert.Greater(t, w.Token(), r1.Token())
		synctest.Wait() // the withdrawal on the nodes that did not grant
		assert.Zero(t, c.holders(redlock.RWWritersKey("schema")), "the writer's intent is gone")
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		assert.Zero(t, c.rwKeysLeft("schema"))
	})
}

// A hold that expired is not released by its Release: a reader's Release
// finds no member of its own on the nodes and reports ErrNotHeld, as the
// writer's and the mutex's do, without touching the readers that hold.
func TestRWMutex_ReleaseAfterExpiryIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		rw, err := c.rl.RWMutex("feed")
		require.NoError(t, err)
		old, err := rw.TryRLock(ctx, time.Second)
		require.NoError(t, err)
		w, err := rw.TryLock(ctx, time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken)
		require.Nil(t, w)
		time.Sleep(1500 * time.Millisecond) // old expires
		r, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err)
		require.ErrorIs(t, old.Release(ctx), redlock.ErrNotHeld, "an expired reader's release")
		_, err = rw.TryLock(ctx, time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken, "the reader that holds still holds")
		require.NoError(t, r.Release(ctx))

		w, err = rw.TryLock(ctx, time.Second)
		require.NoError(t, err)
		time.Sleep(1500 * time.Millisecond) // w expires
		require.ErrorIs(t, w.Release(ctx), redlock.ErrNotHeld, "an expired writer's release")
		synctest.Wait()
		assert.Zero(t, c.rwKeysLeft("feed"))
	})
}

// A writer that gives up withdraws its intent; one that crashed while
// waiting blocks new readers only until its intent expires.
func TestRWMutex_IntentEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		rw, err := c.rl.RWMutex("blob")
		require.NoError(t, err)
		r1, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err)

		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err = rw.Lock(wctx, ttl10s)
		cancel()
		require.ErrorIs(t, err, redlock.ErrTaken)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		synctest.Wait()
		assert.Zero(t, c.holders(redlock.RWWritersKey("blob")), "a writer that gave up withdrew its intent")
		r2, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err)

		// A crashed waiting writer: its intent is on every node, with the
		// life the library gives it (max(TTL, 1 s)).
		for _, nd := range c.nodes {
			_, err := nd.m.ZAdd(redlock.RWWritersKey("blob"), float64(time.Now().Add(time.Second).UnixMilli()), "crashed")
			require.NoError(t, err)
			nd.m.SetTTL(redlock.RWWritersKey("blob"), time.Second)
		}
		_, err = rw.TryRLock(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		time.Sleep(1100 * time.Millisecond)
		r3, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err, "the crashed writer's intent expired")
		for _, r := range []*redlock.RWLock{r1, r2, r3} {
			require.NoError(t, r.Release(ctx))
		}
		synctest.Wait()
		assert.Zero(t, c.rwKeysLeft("blob"))
	})
}

// A reader holds only with a majority: a writer on a majority of the nodes
// refuses readers even where the other nodes grant, and the attempt leaves
// nothing on them.
func TestRWMutex_QuorumPerHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 5)
		rw, err := c.rl.RWMutex("obj")
		require.NoError(t, err)
		w, err := rw.TryLock(ctx, ttl10s) // the name's history: every epoch trusted
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		c.holdElsewhere(t, "obj", ttl10s, 0, 1, 2)
		_, err = rw.TryRLock(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrTaken)
		synctest.Wait()
		assert.Zero(t, c.holders(redlock.RWReadersKey("obj")), "the failed reader was taken back")

		for _, i := range []int{0, 1, 2} {
			c.nodes[i].m.Del("obj")
		}
		c.holdElsewhere(t, "obj", ttl10s, 3, 4) // a minority only
		r, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err, "a minority's writer does not stop a reader")
		require.NoError(t, r.Release(ctx))
	})
}

// DoRead and DoWrite run fn under the lock, extended while it runs, and
// release it after; fn sees the token in its Lease.
func TestRWMutex_Do(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		rw, err := c.rl.RWMutex("report")
		require.NoError(t, err)
		var wtok uint64
		require.NoError(t, rw.DoWrite(ctx, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			wtok = lease.Token()
			assert.False(t, lease.RWLock().Shared())
			time.Sleep(3 * time.Second) // longer than the TTL: the Lease extends it
			_, err := rw.TryRLock(ctx, time.Second)
			assert.ErrorIs(t, err, redlock.ErrTaken)
			return ctx.Err()
		}))
		readers := make(chan struct{})
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				errs <- rw.DoRead(ctx, time.Second, func(ctx context.Context, lease *redlock.Lease) error {
					assert.True(t, lease.RWLock().Shared())
					assert.Equal(t, wtok, lease.Token())
					<-readers // both hold at once
					return nil
				})
			}()
		}
		time.Sleep(100 * time.Millisecond)
		close(readers)
		require.NoError(t, <-errs)
		require.NoError(t, <-errs)
		boom := errors.New("boom")
		require.ErrorIs(t, rw.DoRead(ctx, time.Second, func(context.Context, *redlock.Lease) error { return boom }), boom)
		synctest.Wait()
		assert.Zero(t, c.rwKeysLeft("report"))
	})
}

// Bad input is an error, never a panic.
func TestRWMutex_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		_, err := c.rl.RWMutex("")
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = c.rl.RWMutex("a{}b")
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = c.rl.RWMutex("x", redlock.WithMinHold(time.Second))
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		rw, err := c.rl.RWMutex("x")
		require.NoError(t, err)
		_, err = rw.TryRLock(ctx, 0)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = rw.Lock(ctx, -time.Second)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		require.ErrorIs(t, rw.DoRead(ctx, time.Second, nil), redlock.ErrInvalidArgument)
		var nilCtx context.Context
		for _, lock := range []func(context.Context, time.Duration, ...redlock.Option) (*redlock.RWLock, error){rw.RLock, rw.TryRLock, rw.Lock, rw.TryLock} {
			_, err = lock(nilCtx, time.Second)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		}
		noop := func(context.Context, *redlock.Lease) error { return nil }
		require.ErrorIs(t, rw.DoRead(nilCtx, time.Second, noop), redlock.ErrInvalidArgument)
		require.ErrorIs(t, rw.DoWrite(nilCtx, time.Second, noop), redlock.ErrInvalidArgument)
		r, err := rw.TryRLock(ctx, time.Second)
		require.NoError(t, err)
		_, err = r.Extend(nilCtx, time.Second)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		require.NoError(t, r.Release(ctx))
		require.NoError(t, c.rl.Close())
		_, err = c.rl.RWMutex("x")
		require.ErrorIs(t, err, redlock.ErrClosed)
		_, err = rw.TryLock(ctx, time.Second)
		require.ErrorIs(t, err, redlock.ErrClosed)
	})
}

// The fencing rule of docs/fencing.md for a read/write lock, with
// fencing.RWRegister: a read that raced a newer write is refused, and so is
// the write of a writer that paused past its lock, whether a newer writer
// or readers followed it; the current holders pass.
func TestRWMutex_FencingRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		rw, err := c.rl.RWMutex("doc")
		require.NoError(t, err)
		var res fencing.RWRegister
		w1, err := rw.TryLock(ctx, time.Second)
		require.NoError(t, err)
		require.NoError(t, res.CheckWrite(w1.Token()), "w1 writes")
		time.Sleep(2 * time.Second) // w1 pauses past its lock

		r, err := rw.TryRLock(ctx, time.Second)
		require.NoError(t, err)
		require.Equal(t, w1.Token(), r.Token())
		require.NoError(t, res.CheckRead(r.Token()), "a current reader reads")
		require.ErrorIs(t, res.CheckWrite(w1.Token()), fencing.ErrStale, "paused w1's late write, after readers followed it")
		time.Sleep(2 * time.Second) // the reader pauses past its lock

		w2, err := rw.TryLock(ctx, time.Second)
		require.NoError(t, err)
		require.NoError(t, res.CheckWrite(w2.Token()), "w2 writes")
		require.ErrorIs(t, res.CheckRead(r.Token()), fencing.ErrStale, "the paused reader's read raced a newer write")
		require.ErrorIs(t, res.CheckWrite(w1.Token()), fencing.ErrStale, "a stale writer's write")
		require.NoError(t, w2.Release(ctx))

		r2, err := rw.TryRLock(ctx, time.Second)
		require.NoError(t, err)
		require.NoError(t, res.CheckRead(r2.Token()), "a reader after w2 carries w2's token")
		require.NoError(t, r2.Release(ctx))
	})
}
