package redlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The wake-ups of the read/write lock (rwReleaseLua, luaWakeNext): a
// release that leaves a node free for a writer tells the longest-waiting
// writer when one waits, before any reader (readerTicketMark). The
// waiting Clients here retry every 10 s (longWait): in fake time, an
// acquisition right after a release was woken by it, and the attempt
// counts show who was woken when.

// rwResult is what a waiting RLock or Lock got: its handle, or its error,
// and when.
type rwResult struct {
	who string
	l   *redlock.RWLock
	err error
	at  time.Time
}

// rwWait runs acquire in the background; its result comes on the channel.
func rwWait(who string, acquire func() (*redlock.RWLock, error)) <-chan rwResult {
	out := make(chan rwResult, 1)
	go func() {
		l, err := acquire()
		out <- rwResult{who: who, l: l, err: err, at: time.Now()}
	}()
	return out
}

// notYet fails the test if ch already has a result: that waiter was woken
// (and got the lock) when it should still wait.
func notYet(t *testing.T, ch <-chan rwResult, why string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: %s acquired (err %v)", why, r.who, r.err)
	default:
	}
}

func rwOf(t *testing.T, rl *redlock.Client, name string) *redlock.RWMutex {
	t.Helper()
	rw, err := rl.RWMutex(name)
	require.NoError(t, err)
	return rw
}

// A writer waiting behind readers gets the lock as the last reader
// releases, without sitting out its retry delay, although a reader that
// the writers' intents refuse has waited longer than it. Before, the
// release told the longest waiter, that reader: it was refused by the
// writer's intent, and the writer waited its 10 s.
func TestRWMutex_LastReaderWakesWaitingWriter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		rw := rwOf(t, c.rl, "cache")
		readers := rwOf(t, c.secondClient(t, longWait), "cache")
		writer := rwOf(t, c.secondClient(t, longWait), "cache")
		r1, err := rw.TryRLock(ctx, ttl10s)
		require.NoError(t, err)

		// A writer that crashed while waiting left its intent (for 1 s):
		// a new reader is refused and waits, the longest waiter.
		for _, nd := range c.nodes {
			_, err := nd.m.ZAdd(redlock.RWWritersKey("cache"), float64(time.Now().Add(time.Second).UnixMilli()), "crashed")
			require.NoError(t, err)
			nd.m.SetTTL(redlock.RWWritersKey("cache"), time.Second)
		}
		r2 := rwWait("r2", func() (*redlock.RWLock, error) { return readers.RLock(ctx, ttl10s) })
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		// Then a writer, refused by r1: it posts its own intent and waits.
		w := rwWait("w", func() (*redlock.RWLock, error) { return writer.Lock(ctx, ttl10s) })
		time.Sleep(2 * time.Second) // the crashed writer's intent is gone; w's stays
		synctest.Wait()
		require.Equal(t, []int{2, 2, 2}, c.numWaiting("cache"), "r2 and w wait on every node")

		released := time.Now()
		require.NoError(t, r1.Release(ctx))
		got := <-w
		require.NoError(t, got.err)
		assert.Equal(t, released, got.at, "the last reader's release woke the writer")
		assert.Equal(t, 2, got.l.Attempts())
		synctest.Wait()
		notYet(t, r2, "the writer holds")

		released = time.Now()
		require.NoError(t, got.l.Release(ctx))
		rd := <-r2
		require.NoError(t, rd.err)
		assert.Equal(t, released, rd.at, "the writer's release woke the reader")
		assert.Equal(t, 2, rd.l.Attempts(), "the reader was not woken before, to be refused")
		require.NoError(t, rd.l.Release(ctx))
		synctest.Wait()
		assert.Zero(t, c.rwKeysLeft("cache"))
		assert.Equal(t, []int{0, 0, 0}, c.numWaiting("cache"))
	})
}

// A writer's release, with a reader that came first and a writer after it
// waiting, wakes the writer (a Lock, or Client.Acquire of the name, which
// is a writer too), never the reader: the reader is woken by that writer's
// release, and makes no attempt between (two attempts in all). Before, the
// release told the reader, the longest waiter: refused by the Lock's
// intent, or holding beside the Acquire's lock, while the writer waited its
// 10 s.
func TestRWMutex_WaitingWriterWokenBeforeOlderReader(t *testing.T) {
	for _, kind := range []string{"Lock", "Client.Acquire"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, 3)
				rw := rwOf(t, c.rl, "cache")
				readers := rwOf(t, c.secondClient(t, longWait), "cache")
				wc := c.secondClient(t, longWait)
				writer := rwOf(t, wc, "cache")
				w1, err := rw.TryLock(ctx, ttl10s)
				require.NoError(t, err)

				r := rwWait("r", func() (*redlock.RWLock, error) { return readers.RLock(ctx, ttl10s) })
				time.Sleep(10 * time.Millisecond)
				synctest.Wait()
				var release func() error
				w2 := rwWait("w2", func() (*redlock.RWLock, error) {
					if kind == "Lock" {
						l, err := writer.Lock(ctx, ttl10s)
						if err == nil {
							release = func() error { return l.Release(ctx) }
						}
						return l, err
					}
					l, err := wc.Acquire(ctx, "cache", ttl10s)
					if err != nil {
						return nil, err
					}
					release = func() error { return l.Release(ctx) }
					return &redlock.RWLock{Lock: l}, nil
				})
				time.Sleep(time.Second)
				synctest.Wait()
				require.Equal(t, []int{2, 2, 2}, c.numWaiting("cache"))

				released := time.Now()
				require.NoError(t, w1.Release(ctx))
				got := <-w2
				require.NoError(t, got.err)
				assert.Equal(t, released, got.at, "w1's release woke w2")
				assert.Equal(t, 2, got.l.Attempts())
				synctest.Wait()
				notYet(t, r, "w2 holds")

				released = time.Now()
				require.NoError(t, release())
				rd := <-r
				require.NoError(t, rd.err)
				assert.Equal(t, released, rd.at, "w2's release woke the reader")
				assert.Equal(t, 2, rd.l.Attempts(), "the reader was not woken by w1's release")
				require.NoError(t, rd.l.Release(ctx))
				synctest.Wait()
				assert.Zero(t, c.rwKeysLeft("cache"))
			})
		})
	}
}
