package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// numSub returns, per node, how many connections are subscribed to the
// release channel of key.
func (c *cluster) numSub(key string) []int {
	ch := redlock.ReleaseChannel(key)
	out := make([]int, len(c.nodes))
	for i, nd := range c.nodes {
		out[i] = nd.m.PubSubNumSub(ch)[ch]
	}
	return out
}

// longWait retries every 10 s: any acquisition well before that was woken.
var longWait = redlock.WithRetry(redlock.LinearRetry(10*time.Second, 0, 0))

func TestAcquire_WokenByRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		other := c.secondClient(t, longWait)
		held, err := c.rl.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)

		start := time.Now()
		got := make(chan *redlock.Lock)
		go func() {
			l, err := other.Acquire(ctx, "job", time.Minute)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []int{1, 1, 1}, c.numSub("job"), "the waiter subscribes on every node")
		require.NoError(t, held.Release(ctx))
		l := <-got
		// Fake time: the release came at 1 s, the retry delay ends at 10 s.
		require.Equal(t, time.Second, time.Since(start), "acquired right after the release")
		require.Equal(t, 2, l.Attempts())
		synctest.Wait()
		require.Equal(t, []int{1, 1, 1}, c.numSub("job"), "the subscription lingers after the wait")
		time.Sleep(redlock.SubscriptionLinger)
		synctest.Wait()
		require.Equal(t, []int{0, 0, 0}, c.numSub("job"), "unsubscribed a linger after the wait ended")
		keys, subs := redlock.NotifyState(other)
		require.Zero(t, keys)
		require.Zero(t, subs)
		require.NoError(t, l.Release(ctx))
	})
}

// Without pub/sub (SUBSCRIBE refused on every node) or when the key expires
// instead of being released, the waiter acquires by its retry policy, never
// later.
func TestAcquire_WithoutReleaseMessageFallsBackToRetryPolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noPubSub  bool
		expire    bool
		wantAfter time.Duration
	}{
		{name: "subscribe refused, released", noPubSub: true, wantAfter: 10 * time.Second},
		{name: "subscribed, key expires", expire: true, wantAfter: 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newCluster(t, 3)
				c.warmUp(t)
				if tc.noPubSub {
					for _, nd := range c.nodes {
						nd.FailIf(func(cmd string, _ []string) bool { return cmd == "SUBSCRIBE" })
					}
				}
				other := c.secondClient(t, longWait)
				held, err := c.rl.TryAcquire(ctx, "job", 5*time.Second)
				require.NoError(t, err)
				start := time.Now()
				got := make(chan *redlock.Lock)
				go func() {
					l, err := other.Acquire(ctx, "job", time.Minute)
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				time.Sleep(time.Second)
				if !tc.expire {
					require.NoError(t, held.Release(ctx))
				}
				l := <-got
				require.Equal(t, tc.wantAfter, time.Since(start))
				require.Equal(t, 2, l.Attempts())
				time.Sleep(redlock.SubscriptionLinger)
				synctest.Wait()
				require.Equal(t, []int{0, 0, 0}, c.numSub("job"))
				require.NoError(t, l.Release(ctx))
			})
		})
	}
}

// A waiter retries once a majority of nodes announced the same release, not
// on one node's message nor on a majority made of different releases: a
// minority is what a split vote's losers free.
func TestAcquire_WokenByMajorityOfOneRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		c.warmUp(t)
		c.holdElsewhere(t, "job", time.Minute, 0, 1, 2, 3, 4)
		start := time.Now()
		got := make(chan *redlock.Lock)
		go func() {
			l, err := c.rl.Acquire(ctx, "job", time.Minute, longWait)
			if err != nil {
				t.Error(err)
			}
			got <- l
		}()
		ch := redlock.ReleaseChannel("job")
		// Two losers free two nodes each, then the holder releases node by
		// node, one second apart.
		steps := []struct {
			node int
			id   string
		}{{0, "loser1"}, {1, "loser1"}, {2, "loser2"}, {3, "loser2"}, {2, "holder"}, {3, "holder"}, {4, "holder"}}
		for i, st := range steps {
			time.Sleep(time.Second)
			synctest.Wait()
			nd := c.nodes[st.node]
			if st.id == "holder" {
				nd.m.Del("job")
			}
			require.Equal(t, 1, nd.m.Publish(ch, "1 "+st.id))
			synctest.Wait()
			select {
			case l := <-got:
				require.Equal(t, 6, i, "woken after message %d; the majority of one release is message 6", i)
				require.Equal(t, 7*time.Second, time.Since(start))
				require.Equal(t, 2, l.Attempts())
				require.NoError(t, l.Release(ctx))
				return
			default:
			}
		}
		t.Fatal("not woken by a majority of nodes announcing one release")
	})
}

// The waiters of one Client on one key take it in the order they came,
// each as soon as the one before releases.
func TestAcquire_WaitersOfOneClientInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		other := c.secondClient(t)
		held, err := other.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)
		start := time.Now()
		var (
			mu    sync.Mutex
			order []string
		)
		var wg sync.WaitGroup
		for i := range 4 {
			name := fmt.Sprintf("w%d", i)
			wg.Go(func() {
				l, err := c.rl.Acquire(ctx, "job", time.Minute, longWait)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, fmt.Sprintf("%s@%v/%d", name, time.Since(start), l.Attempts()))
				mu.Unlock()
				time.Sleep(100 * time.Millisecond)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			})
			time.Sleep(time.Millisecond) // join in this order
			synctest.Wait()
		}
		time.Sleep(time.Second)
		require.NoError(t, held.Release(ctx))
		wg.Wait()
		// Released at 1.004 s; each holds 100 ms. Nobody waited for the 10 s
		// retry delay, and only the head of the queue was woken each time:
		// two attempts each.
		require.Equal(t, "w0@1.004s/2 w1@1.104s/2 w2@1.204s/2 w3@1.304s/2", strings.Join(order, " "))
		time.Sleep(redlock.SubscriptionLinger)
		synctest.Wait()
		require.Equal(t, []int{0, 0, 0}, c.numSub("job"))
	})
}

// Subscriptions end with the waits: many keys, each waited for and
// released, leave nothing subscribed and no per-key state.
func TestAcquire_ReleaseSubscriptionsDoNotAccumulate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		other := c.secondClient(t, longWait)
		for i := range 300 {
			key := fmt.Sprintf("job-%d", i)
			held, err := c.rl.TryAcquire(ctx, key, time.Minute)
			require.NoError(t, err)
			got := make(chan *redlock.Lock)
			go func() {
				l, err := other.Acquire(ctx, key, time.Minute)
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			time.Sleep(time.Millisecond)
			synctest.Wait()
			require.NoError(t, held.Release(ctx))
			l := <-got
			require.Equal(t, 2, l.Attempts(), key)
			require.NoError(t, l.Release(ctx))
		}
		time.Sleep(redlock.SubscriptionLinger)
		synctest.Wait()
		keys, subs := redlock.NotifyState(other)
		require.Zero(t, keys)
		require.Zero(t, subs)
		for _, nd := range c.nodes {
			n := 0
			for _, v := range nd.m.PubSubNumSub() {
				n += v
			}
			require.Zero(t, n, "channels still subscribed on %s: %v", nd.addr, nd.m.PubSubChannels(""))
		}
	})
}

// Close wakes a waiting Acquire (ErrClosed) and ends the pub/sub
// connections and their goroutines (the bubble would not end otherwise;
// TestMain checks goroutines with goleak).
func TestClose_EndsWaitsAndSubscriptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		c.holdElsewhere(t, "job", time.Minute, 0, 1, 2)
		other := c.secondClient(t, longWait)
		start := time.Now()
		done := make(chan error)
		go func() {
			_, err := other.Acquire(ctx, "job", time.Minute)
			done <- err
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []int{1, 1, 1}, c.numSub("job"))
		require.NoError(t, other.Close())
		require.ErrorIs(t, <-done, redlock.ErrClosed)
		require.Equal(t, time.Second, time.Since(start))
		synctest.Wait()
		require.Equal(t, []int{0, 0, 0}, c.numSub("job"))
	})
}

// On real redis-server (Lua PUBLISH and PUBSUB NUMSUB inside a script, a
// Client from Dial): a waiter with a one-minute retry delay acquires right
// after the release, on its second attempt. Real time: it asserts the
// attempt count, and the context's 30 s cut-off would fail it otherwise.
func TestRealRedis_WaiterWokenByRelease(t *testing.T) {
	rc := startRealCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := rc.rl.TryAcquire(ctx, "report", time.Minute)
	require.NoError(t, err)
	other, err := redlock.Dial(rc.rl.Nodes(), redlock.WithRetry(redlock.LinearRetry(time.Minute, 0, 0)))
	require.NoError(t, err)
	defer func() { require.NoError(t, other.Close()) }()
	got := make(chan error, 1)
	var l *redlock.Lock
	go func() {
		var err error
		l, err = other.Acquire(ctx, "report", time.Minute)
		got <- err
	}()
	// Release once the waiter has subscribed on every node.
	ch := redlock.ReleaseChannel("report")
	require.Eventually(t, func() bool {
		for _, p := range rc.plain {
			if n := p.PubSubNumSub(ctx, ch).Val()[ch]; n != 1 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond)
	require.NoError(t, held.Release(ctx))
	require.NoError(t, <-got)
	require.Equal(t, 2, l.Attempts())
	require.NoError(t, l.Release(ctx))
	require.Eventually(t, func() bool {
		for _, p := range rc.plain {
			if n := p.PubSubNumSub(ctx, ch).Val()[ch]; n != 0 {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "unsubscribed after the wait")
}

// When k Clients wait for a key, a release is followed by about two
// attempts, not k: each woken Client tries with probability 2/k.
func TestAcquire_WokenClientsThinOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		held, err := c.rl.TryAcquire(ctx, "job", time.Minute)
		require.NoError(t, err)
		const k = 10
		var wg sync.WaitGroup
		for range k {
			other := c.secondClient(t, longWait)
			wg.Go(func() {
				l, err := other.Acquire(ctx, "job", time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Second)
				if err := l.Release(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, []int{k, k, k}, c.numSub("job"))
		var attempts atomic.Int32
		c.nodes[0].FailIf(func(cmd string, args []string) bool {
			if isScript("acquire", cmd, args) {
				attempts.Add(1)
			}
			return false
		})
		require.NoError(t, held.Release(ctx))
		synctest.Wait() // the woken Clients' attempts; a winner holds 1 s
		// Binomial(10, 0.1): 10 attempts has a probability of 1e-10.
		require.Less(t, attempts.Load(), int32(k), "every woken Client tried")
		wg.Wait()
	})
}

// A test node's subscriber that does not read (go-redis's pub/sub reader
// sleeps 100 ms after a failed read) stops no bubble's clock while messages
// are published to it. On a bare net.Pipe, miniredis's reply write blocks
// holding the connection's mutex, the publish goroutine waits on that mutex
// (not durably blocked), and fake time stops: this test, and
// TestLockInvariants, hung.
func TestTestNode_SubscriberThatDoesNotReadStopsNoClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 1)
		nd := c.nodes[0]
		conn, err := nd.dial()
		require.NoError(t, err)
		defer func() { _ = conn.Close() }()
		_, err = conn.Write([]byte("*2\r\n$9\r\nSUBSCRIBE\r\n$2\r\nch\r\n"))
		require.NoError(t, err)
		synctest.Wait() // subscribed; the reply is never read
		for range 3 {
			n, err := nd.rc.Publish(ctx, "ch", "released").Result()
			require.NoError(t, err)
			require.Equal(t, int64(1), n, "one subscriber")
		}
		start := time.Now()
		time.Sleep(time.Second)
		require.Equal(t, time.Second, time.Since(start))
	})
}
