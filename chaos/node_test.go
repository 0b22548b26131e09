package chaos

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// newTestCluster starts a cluster for the test and closes it at the end,
// checking that no redis-server process is left. For the redis-server
// backend it skips without redis-server (fails under CI=true).
func newTestCluster(t *testing.T, opt ClusterOptions) *Cluster {
	t.Helper()
	if opt.Backend == RedisServer && opt.RedisBinary == "" {
		opt.RedisBinary = redisserver.Require(t)
	}
	c, err := NewCluster(tctx(t, 10*time.Second), opt)
	if err != nil {
		t.Fatalf("NewCluster(%+v): %v", opt, err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		if pids := redisserver.LivePids(); len(pids) != 0 {
			t.Errorf("redis-server pids left after Close: %v", pids)
		}
		waitDialProbes(t)
	})
	return c
}

// newCatalogueCluster starts a 5-node cluster on backend for one scenario
// of a catalogue run, closed when the test ends. Not newTestCluster: its
// clean-up requires that no redis-server at all is left, while the other
// scenarios' clusters still run; the catalogue checks that once all are
// closed.
func newCatalogueCluster(t *testing.T, backend Backend) *Cluster {
	t.Helper()
	opt := ClusterOptions{Backend: backend, Nodes: 5}
	if backend == RedisServer {
		opt.RedisBinary = redisserver.Require(t)
	}
	c, err := NewCluster(tctx(t, 10*time.Second), opt)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// waitDialProbes waits (up to 3 s) for the dial probes of closed go-redis
// clients to end. After PoolSize failed dials a go-redis v9 pool starts a
// goroutine that re-dials every second until it succeeds or sees the pool
// closed, so it can outlive Client.Close by up to a second; waiting here
// keeps it out of later tests' and TestMain's leak checks.
func waitDialProbes(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "pool.(*ConnPool).tryDial") {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("go-redis dial probes still running 3s after Close")
			return
		}
	}
}

// eachBackend runs f as a subtest on each backend.
func eachBackend(t *testing.T, f func(t *testing.T, b Backend)) {
	for _, b := range []Backend{InProcess, RedisServer} {
		t.Run(string(b), func(t *testing.T) {
			if b == RedisServer {
				redisserver.Require(t)
			}
			f(t, b)
		})
	}
}

// nodeRedis returns a go-redis client to addr with the settings Redlock uses
// (redlock.NewNodeClient: no command retries, one dial attempt, context
// deadlines honoured), closed at the end of the test.
func nodeRedis(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redlock.NewNodeClient(addr, func(o *redis.Options) {
		o.DialTimeout = 200 * time.Millisecond
		o.ReadTimeout, o.WriteTimeout = 2*time.Second, 2*time.Second
		o.PoolSize = 2
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// oneNode starts a one-node cluster with opt (whose Nodes it sets to 1) and
// returns the node and a client to it; everything is closed at the end of the
// test.
func oneNode(t *testing.T, opt ClusterOptions) (*Node, *redis.Client) {
	t.Helper()
	opt.Nodes = 1
	n := newTestCluster(t, opt).Node(0)
	return n, nodeRedis(t, n.Addr())
}

// setKey sets key to "v" with ttl (0: no expiry) through rdb, or fails the
// test.
func setKey(t *testing.T, rdb *redis.Client, key string, ttl time.Duration) {
	t.Helper()
	mustDo(t, "SET "+key, rdb.Set(tctx(t, 2*time.Second), key, "v", ttl).Err())
}

// tctx returns a context that ends after d or at the end of the test.
func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// mustDo fails the test if err is not nil.
func mustDo(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// getKey returns the value of key through rdb, or "" when it is missing.
func getKey(t *testing.T, rdb *redis.Client, key string) string {
	t.Helper()
	v, err := rdb.Get(tctx(t, 2*time.Second), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	mustDo(t, "GET "+key, err)
	return v
}

// isTimeout reports whether err is a client-side timeout.
func isTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func TestNodeKillRefusesConnections(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		c := newTestCluster(t, ClusterOptions{Backend: b, Nodes: 1})
		n := c.Node(0)
		open := nodeRedis(t, n.Addr())
		mustDo(t, "SET", open.Set(tctx(t, 2*time.Second), "k", "v", 0).Err())

		mustDo(t, "Kill", n.Kill())
		if err := open.Get(tctx(t, 2*time.Second), "k").Err(); err == nil {
			t.Fatal("GET on a connection open before Kill succeeded")
		}
		start := time.Now()
		err := nodeRedis(t, n.Addr()).Get(tctx(t, 2*time.Second), "k").Err()
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("GET after Kill: %v, want connection refused", err)
		}
		if d := time.Since(start); d > 500*time.Millisecond {
			t.Errorf("refusal took %v", d)
		}
		mustDo(t, "second Kill", n.Kill())
		if err := n.Pause(time.Second); !errors.Is(err, ErrNodeDown) {
			t.Errorf("Pause on a killed node: %v, want ErrNodeDown", err)
		}
		keys, err := c.keys(tctx(t, 2*time.Second), "*")
		mustDo(t, "Keys", err)
		if _, ok := keys[0]; ok {
			t.Errorf("Keys lists the killed node: %v", keys)
		}

		mustDo(t, "HealAll", c.HealAll(tctx(t, 5*time.Second)))
		want := "v" // in-process data stays in memory
		if b == RedisServer {
			want = "" // no persistence: a killed server comes back empty
		}
		if got := getKey(t, nodeRedis(t, n.Addr()), "k"); got != want {
			t.Errorf("after HealAll GET k = %q, want %q", got, want)
		}
	})
}

func TestNodeRestartKeepsData(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		n, rdb := oneNode(t, ClusterOptions{Backend: b, Persistence: true})
		setKey(t, rdb, "k", 0)
		setKey(t, rdb, "t", time.Minute)

		mustDo(t, "Restart", n.Restart(tctx(t, 5*time.Second))) // running: kill + start
		if got := getKey(t, rdb, "k"); got != "v" {
			t.Fatalf("after Restart GET k = %q, want v", got)
		}
		mustDo(t, "Kill", n.Kill())
		mustDo(t, "Restart", n.Restart(tctx(t, 5*time.Second)))
		if got := getKey(t, rdb, "k"); got != "v" {
			t.Fatalf("after Kill+Restart GET k = %q, want v", got)
		}
		ttl, err := rdb.PTTL(tctx(t, 2*time.Second), "t").Result()
		mustDo(t, "PTTL", err)
		if ttl < 55*time.Second || ttl > time.Minute {
			t.Errorf("after Restart PTTL t = %v, want about 1m", ttl)
		}
	})
}

func TestNodeRestartNeedsPersistence(t *testing.T) {
	c := newTestCluster(t, ClusterOptions{Backend: RedisServer, Nodes: 1})
	n := c.Node(0)
	mustDo(t, "Kill", n.Kill())
	if err := n.Restart(tctx(t, 5*time.Second)); !errors.Is(err, ErrNeedsPersistence) {
		t.Fatalf("Restart without persistence: %v, want ErrNeedsPersistence", err)
	}
	mustDo(t, "RestartAmnesia", n.RestartAmnesia(tctx(t, 5*time.Second)))
	mustDo(t, "PING", nodeRedis(t, n.Addr()).Ping(tctx(t, 2*time.Second)).Err())
}

func TestNodeRestartAmnesia(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		// With persistence on, so the redis-server case shows the wipe.
		n, rdb := oneNode(t, ClusterOptions{Backend: b, Persistence: true})
		setKey(t, rdb, "k", 0)
		mustDo(t, "RestartAmnesia", n.RestartAmnesia(tctx(t, 5*time.Second)))
		if got := getKey(t, rdb, "k"); got != "" {
			t.Fatalf("after RestartAmnesia GET k = %q, want missing", got)
		}
		setKey(t, rdb, "k2", 0)
		// And from the killed state.
		mustDo(t, "Kill", n.Kill())
		mustDo(t, "RestartAmnesia", n.RestartAmnesia(tctx(t, 5*time.Second)))
		if got := getKey(t, rdb, "k2"); got != "" {
			t.Fatalf("after Kill+RestartAmnesia GET k2 = %q, want missing", got)
		}
	})
}

func TestNodePause(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		n, rdb := oneNode(t, ClusterOptions{Backend: b})
		setKey(t, rdb, "k", 5*time.Second)

		const pause = 300 * time.Millisecond
		start := time.Now()
		mustDo(t, "Pause", n.Pause(pause))
		if d := time.Since(start); d > 50*time.Millisecond {
			t.Errorf("Pause blocked for %v", d)
		}
		err := rdb.Get(tctx(t, 100*time.Millisecond), "k").Err()
		if !isTimeout(err) {
			t.Fatalf("GET with 100ms timeout during the pause: %v, want a timeout", err)
		}
		// A command sent during the pause runs when it ends.
		mustDo(t, "SET during pause", rdb.Set(tctx(t, 2*time.Second), "q", "1", 0).Err())
		if d := time.Since(start); d < pause-30*time.Millisecond {
			t.Errorf("SET during the pause returned after %v, want >= %v", d, pause)
		}
		if got := getKey(t, rdb, "k"); got != "v" {
			t.Fatalf("after the pause GET k = %q, want v", got)
		}
		ttl, err := rdb.PTTL(tctx(t, 2*time.Second), "k").Result()
		mustDo(t, "PTTL", err)
		if ttl > 5*time.Second-pause+50*time.Millisecond {
			t.Errorf("PTTL after the pause = %v: the TTL did not run during the pause", ttl)
		}
		if err := n.Pause(0); !errors.Is(err, ErrInvalidFault) {
			t.Errorf("Pause(0): %v, want ErrInvalidFault", err)
		}
	})
}

func TestNodeKillEndsPauseAndDropsQueuedCommands(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		n, rdb := oneNode(t, ClusterOptions{Backend: b, Persistence: true})
		setKey(t, rdb, "base", 0)
		start := time.Now()
		mustDo(t, "Pause", n.Pause(10*time.Second))
		if err := rdb.Set(tctx(t, 150*time.Millisecond), "queued", "1", 0).Err(); !isTimeout(err) {
			t.Fatalf("SET during the pause: %v, want a timeout", err)
		}
		mustDo(t, "Kill", n.Kill())
		mustDo(t, "Restart", n.Restart(tctx(t, 5*time.Second)))
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("Kill during a 10s pause took until %v", d)
		}
		if got := getKey(t, rdb, "queued"); got != "" {
			t.Errorf("a command queued during the pause ran despite the Kill: queued = %q", got)
		}
		if got := getKey(t, rdb, "base"); got != "v" {
			t.Errorf("GET base = %q, want v", got)
		}
	})
}

func TestNodeJumpClock(t *testing.T) {
	eachClock(t, func(t *testing.T, opt ClusterOptions) {
		n, rdb := oneNode(t, opt)
		ctx := tctx(t, 5*time.Second)
		mustDo(t, "SET", rdb.Set(ctx, "short", "v", 800*time.Millisecond).Err())
		mustDo(t, "SET", rdb.Set(ctx, "long", "v", 10*time.Second).Err())
		mustDo(t, "SET", rdb.Set(ctx, "forever", "v", 0).Err())

		mustDo(t, "JumpClock", n.JumpClock(time.Second))
		if got := getKey(t, rdb, "short"); got != "" {
			t.Errorf("after a 1s jump an 800ms key is still there")
		}
		ttl, err := rdb.PTTL(ctx, "long").Result()
		mustDo(t, "PTTL", err)
		if ttl < 8700*time.Millisecond || ttl > 9*time.Second {
			t.Errorf("after a 1s jump PTTL of a 10s key = %v, want about 9s", ttl)
		}
		if got := getKey(t, rdb, "forever"); got != "v" {
			t.Errorf("a key without TTL is gone after a jump")
		}
		if off := time.Until(n.Clock()); off < 950*time.Millisecond || off > 1050*time.Millisecond {
			t.Errorf("Clock is %v ahead of real time, want 1s", off)
		}
		if realClock(opt) {
			return // stepping back: TestNodeRealClockStepsBack
		}
		if err := n.JumpClock(-time.Second); !errors.Is(err, ErrUnsupported) {
			t.Errorf("JumpClock(-1s): %v, want ErrUnsupported", err)
		}
	})
}

func TestNodeJumpClockWhileKilled(t *testing.T) {
	eachClock(t, func(t *testing.T, opt ClusterOptions) {
		opt.Persistence = true
		n, rdb := oneNode(t, opt)
		setKey(t, rdb, "k", 3*time.Second)
		mustDo(t, "Kill", n.Kill())
		mustDo(t, "JumpClock", n.JumpClock(5*time.Second))
		mustDo(t, "Restart", n.Restart(tctx(t, 5*time.Second)))
		if got := getKey(t, rdb, "k"); got != "" {
			t.Errorf("a 3s key survived a 5s jump made while the node was down")
		}
	})
}

func TestNodeSetClockRate(t *testing.T) {
	eachClock(t, func(t *testing.T, opt ClusterOptions) {
		n, rdb := oneNode(t, opt)
		setKey(t, rdb, "k", 600*time.Millisecond)
		start := time.Now()
		mustDo(t, "SetClockRate", n.SetClockRate(3))
		if n.ClockRate() != 3 {
			t.Errorf("ClockRate = %v, want 3", n.ClockRate())
		}
		for getKey(t, rdb, "k") != "" {
			if time.Since(start) > 2*time.Second {
				t.Fatal("a 600ms key still there after 2s at clock rate 3")
			}
			time.Sleep(5 * time.Millisecond)
		}
		if d := time.Since(start); d < 150*time.Millisecond || d > 450*time.Millisecond {
			t.Errorf("a 600ms key at clock rate 3 expired after %v of real time, want about 200ms", d)
		}
		before := time.Since(start)
		mustDo(t, "SetClockRate(1)", n.SetClockRate(1))
		after := time.Since(start)
		// At rate 3 the clock gains 2× the real time elapsed.
		if off := time.Until(n.Clock()); off < 2*before-10*time.Millisecond || off > 2*after+10*time.Millisecond {
			t.Errorf("after %v-%v at rate 3 the clock is %v ahead, want twice that", before, after, off)
		}

		for _, r := range []float64{0, -1} {
			if err := n.SetClockRate(r); !errors.Is(err, ErrInvalidFault) {
				t.Errorf("SetClockRate(%v): %v, want ErrInvalidFault", r, err)
			}
		}
		if opt.Backend == RedisServer && !realClock(opt) {
			if err := n.SetClockRate(0.5); !errors.Is(err, ErrUnsupported) {
				t.Errorf("SetClockRate(0.5) on redis-server with emulated clocks: %v, want ErrUnsupported", err)
			}
			return
		}
		// A slow clock makes keys live longer.
		setKey(t, rdb, "slow", 200*time.Millisecond)
		mustDo(t, "SetClockRate(0.5)", n.SetClockRate(0.5))
		time.Sleep(250 * time.Millisecond)
		if got := getKey(t, rdb, "slow"); got != "v" {
			t.Errorf("a 200ms key expired within 250ms at clock rate 0.5")
		}
	})
}

func TestNodeInProcessClockDrivesMiniredis(t *testing.T) {
	n, rdb := oneNode(t, ClusterOptions{})
	mustDo(t, "JumpClock", n.JumpClock(time.Hour))
	now, err := rdb.Time(tctx(t, 2*time.Second)).Result()
	mustDo(t, "TIME", err)
	if off := now.Sub(time.Now()); off < time.Hour-time.Second || off > time.Hour+time.Second {
		t.Errorf("TIME is %v ahead of real time after a 1h jump", off)
	}
	mustDo(t, "SetClockRate", n.SetClockRate(2))
	// Bracket each clock reading with real ones, so that the check holds
	// however long the machine takes: the node's clock advanced twice the
	// real time between its two readings, which lies between the inner and
	// the outer real intervals.
	r0 := time.Now()
	c1 := n.Clock()
	r1 := time.Now()
	time.Sleep(100 * time.Millisecond)
	r2 := time.Now()
	c2 := n.Clock()
	r3 := time.Now()
	slack := time.Millisecond
	if d, lo, hi := c2.Sub(c1), 2*r2.Sub(r1), 2*r3.Sub(r0); d < lo-slack || d > hi+slack {
		t.Errorf("at rate 2 the clock advanced %v while real time advanced between %v and %v", d, lo/2, hi/2)
	}
}

func TestNodeNetworkFaults(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		c := newTestCluster(t, ClusterOptions{Backend: b, Nodes: 1})
		n := c.Node(0)
		rdb := nodeRedis(t, n.Addr())
		mustDo(t, "PING", rdb.Ping(tctx(t, 2*time.Second)).Err())
		keysOn := func(pattern string) []string {
			t.Helper()
			keys, err := c.keys(tctx(t, 2*time.Second), pattern)
			mustDo(t, "Keys", err)
			return keys[0]
		}
		timed := func(f func() error) (time.Duration, error) {
			start := time.Now()
			err := f()
			return time.Since(start), err
		}

		n.DelayRequests(150 * time.Millisecond)
		d, err := timed(func() error { return rdb.Set(tctx(t, 2*time.Second), "a", "1", 0).Err() })
		mustDo(t, "SET with delayed requests", err)
		if d < 140*time.Millisecond {
			t.Errorf("SET with requests delayed 150ms took %v", d)
		}
		n.DelayRequests(0)

		n.DelayReplies(150 * time.Millisecond)
		if err := rdb.Get(tctx(t, 75*time.Millisecond), "a").Err(); !isTimeout(err) {
			t.Errorf("GET (75ms timeout) with replies delayed 150ms: %v, want a timeout", err)
		}
		d, err = timed(func() error { return rdb.Get(tctx(t, 2*time.Second), "a").Err() })
		mustDo(t, "GET with delayed replies", err)
		if d < 140*time.Millisecond {
			t.Errorf("GET with replies delayed 150ms took %v", d)
		}
		n.DelayReplies(0)

		n.DropRequests(true)
		if err := rdb.Set(tctx(t, 100*time.Millisecond), "lostreq", "1", 0).Err(); !isTimeout(err) {
			t.Errorf("SET with requests dropped: %v, want a timeout", err)
		}
		n.DropRequests(false)
		if k := keysOn("lostreq"); len(k) != 0 {
			t.Errorf("a dropped request reached the node: %v", k)
		}

		// Warm a connection first: a new go-redis connection starts with a
		// HELLO whose reply would be lost too, and the SET never be sent.
		mustDo(t, "PING", rdb.Ping(tctx(t, 2*time.Second)).Err())
		n.DropReplies(true)
		if err := rdb.Set(tctx(t, 100*time.Millisecond), "lostrep", "1", 0).Err(); !isTimeout(err) {
			t.Errorf("SET with replies dropped: %v, want a timeout", err)
		}
		n.DropReplies(false)
		if k := keysOn("lostrep"); len(k) != 1 {
			t.Errorf("a SET whose reply was lost did not apply: keys %v", k)
		}

		n.Partition(true)
		if err := rdb.Ping(tctx(t, 100*time.Millisecond)).Err(); !isTimeout(err) {
			t.Errorf("PING across a partition: %v, want a timeout", err)
		}
		if k := keysOn("a"); len(k) != 1 { // the harness still sees the node
			t.Errorf("Keys during a partition: %v", k)
		}
		n.HealNetwork()
		mustDo(t, "PING after HealNetwork", rdb.Ping(tctx(t, 2*time.Second)).Err())
	})
}

func TestNodeAccessors(t *testing.T) {
	c := newTestCluster(t, ClusterOptions{Nodes: 3})
	if got := len(c.Nodes()); got != 3 {
		t.Fatalf("Nodes() has %d nodes, want 3", got)
	}
	seen := map[string]bool{}
	for i, n := range c.Nodes() {
		if n.Index() != i || n.Name() == "" || n.Backend() != InProcess || c.Node(i) != n {
			t.Errorf("node %d: Index %d Name %q Backend %q", i, n.Index(), n.Name(), n.Backend())
		}
		if n.Addr() != n.Proxy().Addr() || n.Addr() != c.Addrs()[i] || seen[n.Addr()] {
			t.Errorf("node %d: Addr %q, proxy %q, Addrs %v", i, n.Addr(), n.Proxy().Addr(), c.Addrs())
		}
		seen[n.Addr()] = true
		if n.ClockRate() != 1 {
			t.Errorf("node %d: ClockRate %v, want 1", i, n.ClockRate())
		}
		if off := time.Until(n.Clock()); off < -50*time.Millisecond || off > 50*time.Millisecond {
			t.Errorf("node %d: Clock is %v off real time", i, off)
		}
	}
	if c.Backend() != InProcess {
		t.Errorf("Backend() = %q", c.Backend())
	}
}
