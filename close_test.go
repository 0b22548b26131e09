package redlock_test

import (
	"context"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
)

// Close while Release waits for a queued delete (the client's queue is
// busy with other keys' calls, 100 ms each): Close does not wait for the
// queue beyond its bound (one per-node timeout, then its grace), the
// Release ends then, and the keys it could not delete expire at their TTL.
func TestClose_StopsAReleaseQueuedPastItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, rl := dialCluster(t, 3, 1)
		l, err := rl.Acquire(context.Background(), "k", 2*time.Second)
		require.NoError(t, err)
		wait := fillQueues(rl, nodes, 100*time.Millisecond, 10, false)
		relDone := make(chan error, 1)
		go func() { relDone <- l.Release(context.Background()) }()
		time.Sleep(time.Millisecond)
		start := time.Now()
		require.NoError(t, rl.Close())
		assert.LessOrEqual(t, time.Since(start), defaultTimeout10s+redlock.CloseGrace)
		relErr := <-relDone
		t.Logf("release: %v", relErr)
		wait()
		time.Sleep(2 * time.Second)
		for i, n := range nodes {
			assert.False(t, n.Has("k"), "node %d", i)
		}
	})
}

// Close lands after Acquire's begin and before its votes start (the owner
// generator is the hook): are the attempt's node calls still waited for?
func TestClose_WaitsForAnOperationPastBegin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, rl := dialCluster(t, 3, 10)
		nodes[2].SlowAcquire(50 * time.Millisecond) // a straggler
		t0 := time.Now()
		closed := make(chan error, 1)
		gen := redlock.WithOwnerGenerator(func() (string, error) {
			go func() {
				err := rl.Close()
				took := time.Since(t0)
				assert.GreaterOrEqual(t, took, 50*time.Millisecond, "Close returned while node 2's acquire call (50 ms) was still running")
				closed <- err
			}()
			time.Sleep(time.Millisecond) // Close has set closed and waits
			return "me", nil
		})
		l, err := rl.Acquire(context.Background(), "k", time.Second, gen)
		t.Logf("acquire: %v at %v", err, time.Since(t0))
		_ = l
		require.NoError(t, <-closed)
		time.Sleep(2 * time.Second)
		t.Logf("after 2s: node2 has k: %v", nodes[2].Has("k"))
	})
}

func TestClose_WaitsForAcquisitionStragglersAfterAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, rl := dialCluster(t, 3, 10)
		nodes[2].SlowAcquire(50 * time.Millisecond) // a straggler
		t0 := time.Now()
		_, err := rl.Acquire(context.Background(), "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, rl.Close())
		t.Logf("Close returned at %v; node2 has k: %v", time.Since(t0), nodes[2].Has("k"))
	})
}

// fillQueues makes every node's client queue busy: each node takes delay
// per call on keys "o0", "o1"..., and calls goroutines TryAcquire one of
// them each (releasing what they win, if release). It returns once they
// are all queued (1 ms of fake time), with the function that waits for them.
func fillQueues(rl *redlock.Client, nodes []*testNode, delay time.Duration, calls int, release bool) (wait func()) {
	for _, n := range nodes {
		n.SlowIf(delay, func(cmd string, args []string) bool {
			return len(args) > 2 && strings.HasPrefix(args[2], "o")
		})
	}
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			ol, err := rl.TryAcquire(context.Background(), fmt.Sprint("o", i), 10*time.Second)
			if err == nil && release {
				_ = ol.Release(context.Background())
			}
		})
	}
	time.Sleep(time.Millisecond)
	return wg.Wait
}

// Close returns within the longest per-node timeout its calls used, plus
// closeGrace, whatever the nodes do. Here they run every script an hour late
// (they answer nothing), after an Acquire that gave up at 400 ms and a
// TryAcquire, both with a 10 s TTL (per-node timeout 100 ms): their calls,
// which wait for a reply, and their clean-up's deletes (on the nodes Dial
// connects to, waiting for a connection until the key would expire) are
// still in flight when Close is called.
func TestClose_ReturnsWithinTheNodeTimeoutWhateverTheNodesDo(t *testing.T) {
	for _, dial := range []bool{false, true} {
		t.Run(fmt.Sprint("dial=", dial), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, rl := lateCluster(t, dial)
				for _, nd := range nodes {
					nd.Slow(time.Hour)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
				defer cancel()
				_, err := rl.Acquire(ctx, "job", ttl10s)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				// The calls wait for their reply, the vote does not: one
				// per-node timeout for it, one for the clean-up's deletes.
				start := time.Now()
				_, err = rl.TryAcquire(context.Background(), "job", ttl10s)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				assert.Equal(t, 2*defaultTimeout10s, time.Since(start))
				start = time.Now()
				require.NoError(t, rl.Close())
				assert.LessOrEqual(t, time.Since(start), defaultTimeout10s+redlock.CloseGrace)
			})
		})
	}
}

// hangingDials is a node dialer: a pub/sub connection's dial never connects
// (it waits until its context ends, and records how that ended); any other
// dial is refused at once (go-redis dials its pool's connections in the
// background, on a context of its own that nothing but its DialTimeout
// ends).
type hangingDials struct {
	mu    sync.Mutex
	wg    sync.WaitGroup
	ended []error
}

func (h *hangingDials) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	if !strings.Contains(string(debug.Stack()), "(*PubSub)") {
		return nil, errRefused
	}
	h.wg.Add(1)
	defer h.wg.Done()
	<-ctx.Done()
	h.mu.Lock()
	h.ended = append(h.ended, ctx.Err())
	h.mu.Unlock()
	return nil, ctx.Err()
}

// Nodes that refuse every connection but leave a pub/sub connection's dial
// hanging until its context ends (the dial timeout is a minute): an
// Acquire that gave up at 400 ms, after it waited between attempts, leaves
// such a dial in flight to every node. Close ends those dials
// (context.Canceled) rather than waiting for their timeout. Real time, no
// redis-server needed.
func TestClose_EndsAPubSubDialInFlight(t *testing.T) {
	for _, dial := range []bool{false, true} {
		t.Run(fmt.Sprint("dial=", dial), func(t *testing.T) {
			h := &hangingDials{}
			// A large pool: its background re-dial loop, which starts after as many
			// refused dials as the pool has connections, outlives the test.
			adjust := func(o *redis.Options) { o.Dialer, o.DialTimeout, o.PoolSize = h.dial, time.Minute, 1000 }
			addrs := []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}
			var rl *redlock.Client
			var err error
			if dial {
				rl, err = redlock.DialWith(addrs, func(_ int, o *redis.Options) { adjust(o) })
			} else {
				clients := make([]redis.UniversalClient, len(addrs))
				for i, a := range addrs {
					rc := redlock.NewNodeClient(a, adjust)
					defer func() { _ = rc.Close() }()
					clients[i] = rc
				}
				rl, err = redlock.New(clients)
			}
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
			defer cancel()
			_, err = rl.Acquire(ctx, "job", ttl10s)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			require.NoError(t, rl.Close())
			h.wg.Wait()
			require.NotEmpty(t, h.ended, "no pub/sub connection was dialed")
			for i, err := range h.ended {
				assert.ErrorIs(t, err, context.Canceled, "pub/sub dial %d ended by its own timeout", i)
			}
		})
	}
}

// A straggler of the acquisition whose grant arrives after Acquire returned
// still has work on its node (its counter is below the token: the token is
// written back). Release does not wait for it (it returns at its majority);
// the Client tracks it, so Close does: nothing a lock started outlives Close.
func TestClose_WaitsForAcquisitionStragglers(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		// Node 2 answers the acquisition late, with a counter far below the
		// others' (clock-seeded), and writes the token back slowly.
		require.NoError(t, c.nodes[2].m.Set("{job}:fence", "5"))
		c.nodes[2].SlowScripts(50*time.Millisecond, "acquire", "fence")
		base := goleak.IgnoreCurrent()
		start := time.Now()
		l := c.tryAcquire(t, ctx, "job", ttl10s)
		assert.Zero(t, time.Since(start), "Acquire returns at its quorum")
		// The grant arrives at 50 ms; its write-back runs until 100 ms (and
		// finds the key deleted by then: the owner check leaves the counter).
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, 60*time.Millisecond, time.Since(start), "Release returns at its majority")
		require.NoError(t, c.rl.Close())
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "Close waits for the straggler's write-back")
		lc.verifyNone(t, base)
	})
}
