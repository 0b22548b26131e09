package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The wake-ups of the read/write lock (rwReleaseLua, luaWakeNext with
// shared): a release that leaves a node free for a writer tells the
// longest-waiting writer when one waits, else every waiting reader. The
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

// Several readers waiting behind a writer are all woken by its release and
// hold together, each with its second attempt, whether they share a Client
// (the writer's own included) or not. Before, the release told one of
// them; the others waited their 10 s. Nothing of the wait is left after,
// and the releasing Client's next Lock takes the free lock at once.
func TestRWMutex_WriterReleaseWakesEveryReader(t *testing.T) {
	for _, clients := range []string{"a Client each", "one Client", "the writer's Client"} {
		t.Run(clients, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, 3, longWait)
				rw := rwOf(t, c.rl, "cache")
				w, err := rw.TryLock(ctx, ttl10s)
				require.NoError(t, err)

				const k = 4
				shared := c.secondClient(t, longWait)
				var waiters []*redlock.Client
				var results []<-chan rwResult
				for i := range k {
					rl := shared
					switch clients {
					case "a Client each":
						rl = c.secondClient(t, longWait)
					case "the writer's Client":
						rl = c.rl
					}
					waiters = append(waiters, rl)
					r := rwOf(t, rl, "cache")
					results = append(results, rwWait(fmt.Sprintf("r%d", i), func() (*redlock.RWLock, error) { return r.RLock(ctx, ttl10s) }))
					time.Sleep(time.Millisecond) // join in this order
					synctest.Wait()
				}
				time.Sleep(time.Second)
				synctest.Wait()
				require.Equal(t, []int{k, k, k}, c.numWaiting("cache"))

				released := time.Now()
				require.NoError(t, w.Release(ctx))
				var held []*redlock.RWLock
				for _, ch := range results {
					r := <-ch
					require.NoError(t, r.err, r.who)
					assert.Equal(t, released, r.at, "%s: woken by the writer's release", r.who)
					assert.Equal(t, 2, r.l.Attempts(), r.who)
					held = append(held, r.l)
				}
				synctest.Wait() // every reader's grants have landed, those after its majority too
				_, err = rw.TryLock(ctx, ttl10s)
				require.ErrorIs(t, err, redlock.ErrTaken)
				assert.Contains(t, err.Error(), fmt.Sprintf("%d readers hold it", k), "all hold at once")
				for _, l := range held {
					require.NoError(t, l.Release(ctx))
				}
				synctest.Wait()
				assert.Equal(t, []int{0, 0, 0}, c.numWaiting("cache"))
				for _, rl := range append(waiters, c.rl) {
					waiting, subs := redlock.NotifyState(rl)
					assert.Zero(t, waiting)
					assert.Zero(t, subs)
				}

				start := time.Now()
				w, err = rw.Lock(ctx, ttl10s)
				require.NoError(t, err)
				assert.Equal(t, start, time.Now(), "the releasing Client's next Lock")
				assert.Equal(t, 1, w.Attempts())
				require.NoError(t, w.Release(ctx))
				synctest.Wait()
				assert.Zero(t, c.rwKeysLeft("cache"))
			})
		})
	}
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

// A release that tells every waiting reader still passes over the
// releasing Client's own readers that left and may still be subscribed
// (leftChannels): such a message is a hand-off to nobody, and with no
// other reader told, the release must not count as one (codeHandedOff),
// or the Client's next Client.Acquire of the name would yield to nobody.
// A plain subscriber on the left reader's channel sees whether the
// release published to it.
func TestRWMutex_WakeOfReadersPassesOverTheReleasersReadersThatLeft(t *testing.T) {
	for _, others := range []int{0, 2} {
		t.Run(fmt.Sprintf("%d other readers", others), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, 3)
				rw := rwOf(t, c.rl, "cache")
				w, err := rw.TryLock(ctx, ttl10s)
				require.NoError(t, err)

				rctx, cancel := context.WithCancel(ctx)
				mine := rwWait("mine", func() (*redlock.RWLock, error) { return rw.RLock(rctx, ttl10s) })
				time.Sleep(time.Second)
				synctest.Wait()
				chs := c.waitChannels(0, "cache")
				require.Len(t, chs, 1)
				spies := make([]<-chan *redis.Message, len(c.nodes))
				for i, nd := range c.nodes {
					ps := nd.rc.Subscribe(ctx, chs[0])
					_, err := ps.Receive(ctx)
					require.NoError(t, err)
					defer ps.Close()
					spies[i] = ps.Channel()
				}
				readers := rwOf(t, c.secondClient(t, longWait), "cache")
				var results []<-chan rwResult
				for i := range others {
					results = append(results, rwWait(fmt.Sprintf("r%d", i), func() (*redlock.RWLock, error) { return readers.RLock(ctx, ttl10s) }))
				}
				time.Sleep(time.Second)
				synctest.Wait()

				cancel()
				require.ErrorIs(t, (<-mine).err, context.Canceled)
				released := time.Now()
				require.NoError(t, w.Release(ctx))
				var held []*redlock.RWLock
				for _, ch := range results {
					r := <-ch
					require.NoError(t, r.err, r.who)
					assert.Equal(t, released, r.at, r.who)
					held = append(held, r.l)
				}
				synctest.Wait()
				for i, spy := range spies {
					select {
					case m := <-spy:
						t.Fatalf("node %d told the releaser's reader that left: %v", i, m)
					default:
					}
				}
				for _, l := range held {
					require.NoError(t, l.Release(ctx))
				}

				start := time.Now()
				l, err := c.rl.Acquire(ctx, "cache", ttl10s)
				require.NoError(t, err)
				if others == 0 {
					assert.Equal(t, start, time.Now(), "no hand-off: the next Acquire does not yield")
				}
				require.NoError(t, l.Release(ctx))
			})
		})
	}
}

// On redis-server, whose Lua compares strings in the server's locale
// (strcoll), a writer's release wakes the writer that waits, not the two
// readers that came before it, and that writer's release wakes both
// readers, which then hold together: each acquisition is its second
// attempt (the retry delay is a minute, longer than the test may take).
func TestRealRedis_RWWakeUps(t *testing.T) {
	rc := startRealCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	slow := []redlock.Option{redlock.WithRetry(redlock.LinearRetry(time.Minute, 0, 0)), redlock.WithNodeTimeout(500 * time.Millisecond)}
	mutex := func() *redlock.RWMutex {
		rl, err := redlock.Dial(rc.rl.Nodes(), slow...)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, rl.Close()) })
		return rwOf(t, rl, "rw-wake")
	}
	waiting := func(want int) func() bool {
		return func() bool {
			for _, p := range rc.plain {
				if len(p.PubSubChannels(ctx, redlock.WaitPattern("rw-wake")).Val()) != want {
					return false
				}
			}
			return true
		}
	}
	w1, err := rwOf(t, rc.rl, "rw-wake").TryLock(ctx, time.Minute)
	require.NoError(t, err)
	readers := mutex()
	var rs []<-chan rwResult
	for i := range 2 {
		rs = append(rs, rwWait(fmt.Sprintf("r%d", i), func() (*redlock.RWLock, error) { return readers.RLock(ctx, time.Minute) }))
		require.Eventually(t, waiting(i+1), 20*time.Second, 10*time.Millisecond)
	}
	writer := mutex()
	w2 := rwWait("w2", func() (*redlock.RWLock, error) { return writer.Lock(ctx, time.Minute) })
	require.Eventually(t, waiting(3), 20*time.Second, 10*time.Millisecond)

	require.NoError(t, w1.Release(ctx))
	got := <-w2
	require.NoError(t, got.err)
	assert.Equal(t, 2, got.l.Attempts())
	require.NoError(t, got.l.Release(ctx))
	var held []*redlock.RWLock
	for _, ch := range rs { // both hold before either releases
		r := <-ch
		require.NoError(t, r.err, r.who)
		assert.Equal(t, 2, r.l.Attempts(), "%s: woken by w2's release only", r.who)
		held = append(held, r.l)
	}
	for _, l := range held {
		require.NoError(t, l.Release(ctx))
	}
}

// A release that comes between a waiter's failed attempt and its
// subscription tells nobody: here the nodes run the waiter's attempt at
// once but its replies arrive 1 ms later, and the holder releases within
// that millisecond. A read/write waiter does not then wait on to the
// default policy's queued delay (125-250 ms) because it is subscribed when
// its first short delay (up to 10 ms) ends: nothing tells it of a release
// that came before its subscription, so it makes its next attempt then,
// and gets the lock. It waits on only once it was subscribed on a
// majority before its last attempt began.
func TestRWMutex_ReleaseBeforeSubscriptionCostsNoQueuedDelay(t *testing.T) {
	for _, tc := range []struct{ holder, waiter string }{{"reader", "writer"}, {"writer", "reader"}} {
		t.Run(tc.waiter+" behind a "+tc.holder, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, 3)
				rw := rwOf(t, c.rl, "cache")
				take, wait := rw.TryRLock, rw.Lock
				if tc.holder == "writer" {
					take, wait = rw.TryLock, rw.RLock
				}
				held, err := take(ctx, ttl10s)
				require.NoError(t, err)
				for _, nd := range c.nodes {
					nd.DelayReplies(time.Millisecond)
				}
				start := time.Now()
				got := rwWait(tc.waiter, func() (*redlock.RWLock, error) { return wait(ctx, ttl10s) })
				synctest.Wait() // the nodes refused the waiter; their replies are on their way
				require.NoError(t, held.Release(ctx))
				r := <-got
				require.NoError(t, r.err)
				assert.Equal(t, 2, r.l.Attempts())
				assert.Less(t, r.at.Sub(start), 20*time.Millisecond, "the first delay (up to 10 ms) and two 1 ms replies, not the queued delay")
				require.NoError(t, r.l.Release(ctx))
				synctest.Wait()
				assert.Zero(t, c.rwKeysLeft("cache"))
			})
		})
	}
}
