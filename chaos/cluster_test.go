package chaos

import (
	"errors"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

func TestParseBackend(t *testing.T) {
	for in, want := range map[string]Backend{
		"":               InProcess,
		"inprocess":      InProcess,
		"InProcess":      InProcess,
		"redis-server":   RedisServer,
		" REDIS-SERVER ": RedisServer,
	} {
		got, err := ParseBackend(in)
		if err != nil || got != want {
			t.Errorf("ParseBackend(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"redis", "miniredis", "memory"} {
		if _, err := ParseBackend(in); err == nil {
			t.Errorf("ParseBackend(%q) succeeded", in)
		}
	}
}

func TestNewClusterOptions(t *testing.T) {
	ctx := tctx(t, 5*time.Second)
	if _, err := NewCluster(ctx, ClusterOptions{Nodes: -1}); err == nil {
		t.Error("NewCluster with -1 nodes succeeded")
	}
	if _, err := NewCluster(ctx, ClusterOptions{Backend: "etcd"}); err == nil {
		t.Error("NewCluster with an unknown backend succeeded")
	}
	if _, err := NewCluster(ctx, ClusterOptions{Backend: RedisServer, RedisBinary: "/nonexistent/redis-server"}); err == nil {
		t.Error("NewCluster with a missing redis-server binary succeeded")
	}
	if pids := redisserver.LivePids(); len(pids) != 0 {
		t.Errorf("failed NewCluster left pids %v", pids)
	}
	c := newTestCluster(t, ClusterOptions{})
	if got := len(c.Nodes()); got != DefaultNodes {
		t.Errorf("default cluster has %d nodes, want %d", got, DefaultNodes)
	}
}

func TestClusterClientAcquire(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		c := newTestCluster(t, ClusterOptions{Backend: b})
		// A generous per-node timeout: this test is about the wiring, not
		// about speed on a loaded machine. The guard is off: redis-server
		// nodes killed and healed below come back without their data, and
		// the guard (on by default; the amnesia scenarios test it) would
		// rightly not count them for a quarantine.
		rc, err := c.Client(redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithoutAmnesiaGuard())
		mustDo(t, "Client", err)
		defer rc.Close()
		if got := rc.Nodes(); len(got) != DefaultNodes {
			t.Fatalf("client has nodes %v", got)
		}
		ctx := tctx(t, 10*time.Second)

		lock, err := rc.Acquire(ctx, "res", 5*time.Second)
		mustDo(t, "Acquire", err)
		// Acquire returns once a majority granted (the others may follow).
		keys, err := c.keys(ctx, "res")
		mustDo(t, "Keys", err)
		held := 0
		for _, k := range keys {
			held += len(k)
		}
		if held < rc.Quorum() {
			t.Errorf("after Acquire the key is only on %v", keys)
		}
		mustDo(t, "Release", lock.Release(ctx))
		// Release returns once a majority answered; the rest follow.
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			keys, err = c.keys(ctx, "res")
			mustDo(t, "Keys", err)
			left := 0
			for _, k := range keys {
				left += len(k)
			}
			if left == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("keys left 2s after Release: %v", keys)
			}
		}

		// A minority down: still acquirable.
		mustDo(t, "Kill", c.Node(0).Kill())
		mustDo(t, "Kill", c.Node(1).Kill())
		lock, err = rc.Acquire(ctx, "res", 5*time.Second)
		mustDo(t, "Acquire with 2 of 5 nodes down", err)
		mustDo(t, "Release", lock.Release(ctx))

		// A majority down: refused at once, never a false success.
		mustDo(t, "Kill", c.Node(2).Kill())
		start := time.Now()
		if _, err := rc.TryAcquire(ctx, "res", 5*time.Second); !errors.Is(err, redlock.ErrNotAcquired) {
			t.Errorf("TryAcquire with 3 of 5 nodes down: %v, want ErrNotAcquired", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("TryAcquire against refused nodes took %v", d)
		}

		mustDo(t, "HealAll", c.HealAll(ctx))
		lock, err = rc.Acquire(ctx, "res", 5*time.Second)
		mustDo(t, "Acquire after HealAll", err)
		mustDo(t, "Release", lock.Release(ctx))
	})
}

func TestClusterHealAll(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		c := newTestCluster(t, ClusterOptions{Backend: b})
		ctx := tctx(t, 10*time.Second)
		mustDo(t, "Kill", c.Node(0).Kill())
		mustDo(t, "Pause", c.Node(1).Pause(time.Minute))
		c.Node(2).Partition(true)
		c.Node(2).DelayReplies(time.Second)
		c.Node(3).Proxy().Hold(true)
		mustDo(t, "JumpClock", c.Node(4).JumpClock(time.Second))
		mustDo(t, "SetClockRate", c.Node(4).SetClockRate(3))

		start := time.Now()
		mustDo(t, "HealAll", c.HealAll(ctx))
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("HealAll took %v", d)
		}
		for i, n := range c.Nodes() {
			rdb := nodeRedis(t, n.Addr())
			if err := rdb.Ping(tctx(t, 200*time.Millisecond)).Err(); err != nil {
				t.Errorf("node %d after HealAll: PING: %v", i, err)
			}
			if n.ClockRate() != 1 {
				t.Errorf("node %d after HealAll: clock rate %v", i, n.ClockRate())
			}
		}
		if off := time.Until(c.Node(4).Clock()); off < time.Second {
			t.Errorf("HealAll lost the clock offset: %v ahead", off)
		}
		mustDo(t, "second HealAll", c.HealAll(ctx))
	})
}

func TestClusterFlushAll(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		c := newTestCluster(t, ClusterOptions{Backend: b, Nodes: 3, Persistence: true})
		ctx := tctx(t, 10*time.Second)
		for i, n := range c.Nodes() {
			mustDo(t, "SET", nodeRedis(t, n.Addr()).Set(ctx, "k", i, 0).Err())
		}
		mustDo(t, "Kill", c.Node(1).Kill())
		mustDo(t, "FlushAll", c.FlushAll(ctx))
		mustDo(t, "HealAll", c.HealAll(ctx))
		keys, err := c.keys(ctx, "")
		mustDo(t, "Keys", err)
		if len(keys) != 3 {
			t.Errorf("Keys has %d nodes, want 3", len(keys))
		}
		for i, k := range keys {
			if len(k) != 0 {
				t.Errorf("node %d keeps %v after FlushAll", i, k)
			}
		}

		mustDo(t, "Pause", c.Node(2).Pause(time.Minute))
		if err := c.FlushAll(ctx); !errors.Is(err, ErrNodePaused) {
			t.Errorf("FlushAll with a paused node: %v, want ErrNodePaused", err)
		}
		if _, err := c.keys(ctx, "*"); !errors.Is(err, ErrNodePaused) {
			t.Errorf("Keys with a paused node: %v, want ErrNodePaused", err)
		}
	})
}

func TestClusterCloseLeavesNothing(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
		opt := ClusterOptions{Backend: b, Nodes: 3, Persistence: true}
		if b == RedisServer {
			opt.RedisBinary = redisserver.Require(t)
		}
		c, err := NewCluster(tctx(t, 10*time.Second), opt)
		mustDo(t, "NewCluster", err)
		var pids []int
		if b == RedisServer {
			pids = redisserver.LivePids()
			if len(pids) != 3 {
				t.Errorf("LivePids = %v, want 3 pids", pids)
			}
		}
		// Leave things running: a client never closed, a pause, a fast
		// clock, a delay, a killed node.
		rc, err := c.Client()
		mustDo(t, "Client", err)
		lock, err := rc.Acquire(tctx(t, 5*time.Second), "res", time.Minute)
		mustDo(t, "Acquire", err)
		_ = lock
		mustDo(t, "Pause", c.Node(0).Pause(time.Minute))
		mustDo(t, "SetClockRate", c.Node(1).SetClockRate(2))
		c.Node(1).DelayReplies(time.Minute)
		mustDo(t, "Kill", c.Node(2).Kill())

		start := time.Now()
		mustDo(t, "Close", c.Close())
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Close took %v", d)
		}
		if got := redisserver.LivePids(); len(got) != 0 {
			t.Errorf("redis-server pids left after Close: %v (started %v)", got, pids)
		}
		if b == RedisServer {
			if _, err := os.Stat(c.dir); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("data directory %s left after Close: %v", c.dir, err)
			}
		}
		mustDo(t, "second Close", c.Close())
		n := c.Node(0)
		for name, err := range map[string]error{
			"Kill":         n.Kill(),
			"Restart":      n.Restart(tctx(t, time.Second)),
			"Pause":        n.Pause(time.Second),
			"JumpClock":    n.JumpClock(time.Second),
			"SetClockRate": n.SetClockRate(2),
			"HealAll":      c.HealAll(tctx(t, time.Second)),
			"FlushAll":     c.FlushAll(tctx(t, time.Second)),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close: %v, want ErrClosed", name, err)
			}
		}
		if _, err := c.Client(); !errors.Is(err, ErrClosed) {
			t.Errorf("Client after Close: %v, want ErrClosed", err)
		}
		if _, err := c.keys(tctx(t, time.Second), "*"); !errors.Is(err, ErrClosed) {
			t.Errorf("Keys after Close: %v, want ErrClosed", err)
		}
	})
}
