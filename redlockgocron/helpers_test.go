package redlockgocron_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockgocron"
)

// TestMain fails the package if a test leaves a goroutine behind (a Lease
// never released, a scheduler not shut down). go-redis's own log lines
// about killed nodes are silenced.
func TestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m)
}

// The in-process tests run in testing/synctest bubbles: gocron's timers,
// the library's and the miniredis nodes' TTLs all follow the bubble's fake
// clock, so a minute of ticks takes milliseconds and every instant is exact.

// testNode is one in-memory Redis master, reached over in-memory pipes.
type testNode struct {
	m      *miniredis.Miniredis
	killed atomic.Bool
}

// newNodes starts n in-memory nodes; they are closed in t.Cleanup.
func newNodes(t *testing.T, n int) []*testNode {
	t.Helper()
	// go-redis keeps the timers of commands that waited for a pooled
	// connection in a global sync.Pool: one made in an earlier test's
	// bubble is fatal in this one. Two collections empty the pool.
	runtime.GC()
	runtime.GC()
	nodes := make([]*testNode, n)
	// Registered first, so it runs last: a refused dial starts a re-dial
	// loop in go-redis, which ends within a second of its client's Close,
	// and must end inside the bubble.
	t.Cleanup(func() {
		for _, nd := range nodes {
			if nd.killed.Load() {
				time.Sleep(2 * time.Second)
				return
			}
		}
	})
	for i := range nodes {
		nd := &testNode{m: miniredis.NewMiniRedis()}
		nd.m.ClockTTL(true)
		conn, err := nd.m.Dial() // starts the server, in memory: no listener
		require.NoError(t, err)
		require.NoError(t, conn.Close())
		t.Cleanup(nd.m.Close)
		nodes[i] = nd
	}
	return nodes
}

// Kill stops the node: its connections close and new dials are refused.
func (n *testNode) Kill() {
	n.killed.Store(true)
	n.m.Close()
}

// newReplica returns one replica's Client over the nodes, with connections
// of its own, as another process would have. It is closed in t.Cleanup,
// and its node clients after it.
func newReplica(t *testing.T, nodes []*testNode) *redlock.Client {
	return newSlowReplica(t, nodes, nil)
}

// newSlowReplica is newReplica whose commands to node i take delay(i) to
// reach it (nil: none).
func newSlowReplica(t *testing.T, nodes []*testNode, delay func(node int) time.Duration) *redlock.Client {
	t.Helper()
	clients := make([]redis.UniversalClient, len(nodes))
	for i, nd := range nodes {
		rc := redis.NewClient(&redis.Options{
			Addr: fmt.Sprintf("127.0.0.1:%d", 7001+i), // names the node, never dialed
			Dialer: func(context.Context, string, string) (net.Conn, error) {
				if nd.killed.Load() {
					return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
				}
				conn, err := nd.m.Dial()
				if err != nil || delay == nil {
					return conn, err
				}
				return slowConn{Conn: conn, delay: func() time.Duration { return delay(i) }}, nil
			},
			MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, Protocol: 2, DisableIdentity: true,
		})
		t.Cleanup(func() { _ = rc.Close() })
		clients[i] = rc
	}
	c, err := redlock.New(clients)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

// slowConn delays every write by delay().
type slowConn struct {
	net.Conn
	delay func() time.Duration
}

func (c slowConn) Write(p []byte) (int, error) {
	time.Sleep(c.delay())
	return c.Conn.Write(p)
}

// scenario is a job run on several replicas, each a gocron scheduler with a
// Locker (or an Elector) over its own Client.
type scenario struct {
	interval  time.Duration   // the job's DurationJob interval
	work      time.Duration   // how long one run takes
	starts    []time.Duration // when each replica's scheduler starts, after the first Start
	ticks     int             // the runs stop half an interval after this tick
	opts      []redlockgocron.Option
	elector   bool // an Elector instead of a Locker
	singleton bool // gocron.WithSingletonMode on the job
	// during, when set, runs once the schedulers are started (t0 is the
	// first Start), e.g. to kill a node at some instant; it must return
	// before the last tick.
	during func(t0 time.Time)
}

// run is one run of the job.
type run struct {
	replica    int
	start, end time.Time
	token      uint64 // the lock's (or the leader's) fencing token
}

// replicas runs sc on one replica per client and returns when the first
// scheduler started and every run, by start time.
func (sc scenario) replicas(t *testing.T, clients []*redlock.Client) (t0 time.Time, runs []run) {
	t.Helper()
	var mu sync.Mutex
	// running counts the runs under way; once stopped is set, a run ends at
	// once and is not recorded.
	var running atomic.Int32
	var stopped atomic.Bool
	scheds := make([]gocron.Scheduler, len(clients))
	var electors []*redlockgocron.Elector
	for i, c := range clients {
		var lease func() *redlock.Lease
		var opt gocron.SchedulerOption
		var locker *redlockgocron.Locker
		if sc.elector {
			e, err := redlockgocron.NewElector(c, sc.opts...)
			require.NoError(t, err)
			electors = append(electors, e)
			lease, opt = e.Lease, gocron.WithDistributedElector(e)
		} else {
			l, err := redlockgocron.NewLocker(c, sc.opts...)
			require.NoError(t, err)
			locker = l
			lease, opt = func() *redlock.Lease { return l.Lease("tick") }, gocron.WithDistributedLocker(l)
		}
		s, err := gocron.NewScheduler(opt)
		require.NoError(t, err)
		if locker != nil {
			locker.Attach(s)
		}
		jobOpts := []gocron.JobOption{gocron.WithName("tick")}
		if sc.singleton {
			jobOpts = append(jobOpts, gocron.WithSingletonMode(gocron.LimitModeReschedule))
		}
		_, err = s.NewJob(gocron.DurationJob(sc.interval), gocron.NewTask(func() {
			running.Add(1)
			defer running.Add(-1)
			if stopped.Load() {
				return
			}
			r := run{replica: i, start: time.Now()}
			if l := lease(); l != nil {
				r.token = l.Lock().Token()
			}
			time.Sleep(sc.work)
			r.end = time.Now()
			mu.Lock()
			runs = append(runs, r)
			mu.Unlock()
		}), jobOpts...)
		require.NoError(t, err)
		scheds[i] = s
	}
	t0 = time.Now()
	for _, i := range startOrder(sc.starts) {
		time.Sleep(time.Until(t0.Add(sc.starts[i])))
		scheds[i].Start()
	}
	if sc.during != nil {
		sc.during(t0)
	}
	time.Sleep(time.Until(t0.Add(time.Duration(sc.ticks)*sc.interval + sc.interval/2)))
	// The runs under way end before Shutdown, and later ones at once:
	// Shutdown spins while a job runs, and a spinning goroutine stops a
	// bubble's clock.
	stopped.Store(true)
	for running.Load() > 0 {
		time.Sleep(10 * time.Millisecond)
	}
	for _, s := range scheds {
		require.NoError(t, s.Shutdown())
	}
	for _, e := range electors {
		_ = e.Close(context.Background())
	}
	slices.SortFunc(runs, func(a, b run) int { return a.start.Compare(b.start) })
	return t0, runs
}

// startOrder returns the replicas in the order they start.
func startOrder(starts []time.Duration) []int {
	order := make([]int, len(starts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return int(starts[a] - starts[b]) })
	return order
}

// tick returns the tick (1, 2, ...) of r's replica that started r: its
// schedule fires at its Start + k intervals.
func (sc scenario) tick(t0 time.Time, r run) int {
	since := r.start.Sub(t0.Add(sc.starts[r.replica]))
	return int(math.Round(float64(since) / float64(sc.interval)))
}

// perTick counts the runs of each tick, 1 to sc.ticks; a run of another
// tick fails the test.
func (sc scenario) perTick(t *testing.T, t0 time.Time, runs []run) []int {
	t.Helper()
	counts := make([]int, sc.ticks+1)
	for _, r := range runs {
		k := sc.tick(t0, r)
		if !assert.True(t, k >= 1 && k <= sc.ticks, "run %+v is of tick %d", r, k) {
			continue
		}
		counts[k]++
	}
	return counts[1:]
}

// requireOneAtATime fails if two runs overlap (runs are by start time), or if
// a run's token is not greater than the one before: every run holds a lock
// of its own, or, with sameTerm, runs of one replica in a row may share a
// leader's term and its token.
func requireOneAtATime(t *testing.T, runs []run, sameTerm bool) {
	t.Helper()
	for i, r := range runs {
		require.NotZero(t, r.token, "run %d read no token", i)
	}
	for i := 1; i < len(runs); i++ {
		prev, r := runs[i-1], runs[i]
		require.False(t, r.start.Before(prev.end), "run %d (replica %d, from %v) started before run %d (replica %d) ended at %v",
			i, r.replica, r.start, i-1, prev.replica, prev.end)
		if sameTerm && r.replica == prev.replica {
			require.GreaterOrEqual(t, r.token, prev.token, "fencing tokens of runs %d and %d", i-1, i)
		} else {
			require.Greater(t, r.token, prev.token, "fencing tokens of runs %d and %d", i-1, i)
		}
	}
}

// ones returns n ones: one run per tick.
func ones(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = 1
	}
	return out
}
