package redlock_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

// The model-based test of the lock's invariants. rapid generates
// schedules of client operations (Acquire, TryAcquire, two clients at once,
// Extend longer and shorter, KeepAlive, Release) and node faults inside the
// documented limits (lose data — guard on only, and while a node lost its
// data in the last quarantine, the nodes that did plus those down or about
// to leave an acquire call unanswered stay a minority —, kill and restart, one reply delayed past the decision,
// one reply dropped, one script call failed, one node's clock advanced within
// the drift budget), runs them on in-process nodes in fake time, and after
// every step checks:
//
//   - exclusion: no two owners of a key hold a handle with positive
//     validity at once, and such a handle's key is on a majority of nodes
//     (nodes that lost their data since it was granted aside: the guard's
//     case);
//   - token order: each holder's token is above every earlier holder's;
//   - vouching (guard on): a node that holds a valid holder's key is
//     trusted, however late its grant;
//
// and at the end of each schedule:
//
//   - nothing left after Close: every handle still held is released, the
//     clients are closed, and at once (Release returns at a majority, the
//     rest ends in the background and Close waits for it) no node holds
//     the key of any owner whose Release was called, unless that node was
//     down, dropped a reply, failed a call or was killed since the owner's
//     acquisition started;
//   - liveness: with a majority up and every fault healed, each key is
//     acquired within one quarantine plus one TTL (every earlier key expired);
//   - bounded history: once every name is idle for the retention, no node
//     holds anything, and a later holder's token is still higher.
//
// Each schedule also draws its clients' connection pools (per node,
// go-redis's default or 1 or 2 connections) and whether its clients are
// made by New over node clients they share or (REDLOCK_PROPS_DIAL=1, see
// runSchedule) by Dial, with its per-node queues. With a small pool, a node that lags behind (a late or dropped
// reply) has later acquisitions shed (nodecall.Engine.EnterAcquire) or dropped from its
// queue while they wait for a connection, and an extension can then put
// the key back on such a node: "nothing left after Close" covers those
// nodes too. A call the client did not send is its own limit, not a node
// fault, so it earns no exemption above.
//
// REDLOCK_PROPS=n runs n schedules per configuration instead of the few of
// a normal `go test` run.

// propStats counts what the schedules did, for the log line of each
// configuration (and docs/safety.md).
type propStats struct {
	mu                                    sync.Mutex
	schedules, steps, acquired, extended  int
	released, lost, killed, late, dropped int
	failed, clock, liveness               int
	smallPools, dialed                    int // schedules
}

func (s *propStats) add(f func(*propStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// propSchedules is how many schedules each configuration runs.
func propSchedules() int {
	if s := os.Getenv("REDLOCK_PROPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err == nil && n > 0 {
			return n
		}
	}
	if testing.Short() {
		return 3
	}
	return 8
}

const (
	propQuarantine = time.Minute
	propRetention  = 2 * time.Minute
	propLatency    = time.Millisecond       // every script call; keeps grants apart in time
	propRestart    = 100 * time.Millisecond // a node that lost its data is down at least this long
)

var propTTLs = []time.Duration{time.Second, 2 * time.Second}

func TestLockInvariants(t *testing.T) {
	for _, cfg := range []struct {
		n     int
		guard bool
	}{{3, false}, {3, true}, {5, false}, {5, true}} {
		t.Run(fmt.Sprintf("N=%d guard=%v", cfg.n, cfg.guard), func(t *testing.T) {
			checks := flag.Lookup("rapid.checks")
			old := checks.Value.String()
			if err := checks.Value.Set(strconv.Itoa(propSchedules())); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = checks.Value.Set(old) }()
			stats := &propStats{}
			rapid.Check(t, func(rt *rapid.T) {
				rapid.SyncTest(rt, func(rt *rapid.T) {
					runSchedule(rt, cfg.n, cfg.guard, stats)
				})
			})
			t.Logf("%d schedules (%d with small connection pools, %d made by Dial), %d steps: %d acquisitions, %d extensions, %d releases; faults: %d data losses, %d kills, %d late replies, %d dropped replies, %d failed calls, %d clock advances; %d liveness probes",
				stats.schedules, stats.smallPools, stats.dialed, stats.steps, stats.acquired, stats.extended, stats.released,
				stats.lost, stats.killed, stats.late, stats.dropped, stats.failed, stats.clock, stats.liveness)
		})
	}
}

// propHandle is one handle the schedule holds.
type propHandle struct {
	key      string
	lock     *redlock.Lock
	lease    *redlock.Lease // set when the handle is kept alive
	start    time.Time      // before the acquisition started
	released bool
}

// current returns the handle's latest lock (the Lease's, when kept alive).
func (h *propHandle) current() *redlock.Lock {
	if h.lease != nil {
		return h.lease.Lock()
	}
	return h.lock
}

// propNode is a test node and the faults the schedule put on it.
type propNode struct {
	*testNode
	down  bool
	back  time.Time   // a node that lost its data restarts no sooner
	wipes []time.Time // when it lost its data
	ffs   []ffRecord  // clock advances (TTLs shortened)

	fmu       sync.Mutex
	nextDelay struct {
		script string
		d      time.Duration
	}
	nextFail string    // script whose next call fails
	upset    time.Time // last dropped reply, failed call or kill
}

// acquireUnanswered reports whether the node's next acquire call is to
// fail or time out: in that vote the node counts as unreachable for the
// amnesia guard's limit (withinGuardLimit).
func (pn *propNode) acquireUnanswered() bool {
	pn.fmu.Lock()
	defer pn.fmu.Unlock()
	return pn.nextFail == "acquire" || (pn.nextDelay.script == "acquire" && pn.nextDelay.d >= 100*time.Millisecond)
}

func (pn *propNode) setUpset() {
	pn.fmu.Lock()
	pn.upset = time.Now()
	pn.fmu.Unlock()
}

func (pn *propNode) upsetSince(t time.Time) bool {
	pn.fmu.Lock()
	defer pn.fmu.Unlock()
	return !pn.upset.Before(t)
}

type ffRecord struct {
	at time.Time
	d  time.Duration
}

// model is one schedule's world.
type model struct {
	t       *rapid.T
	n       int
	guard   bool
	nodes   []*propNode
	clients []*redlock.Client
	keys    []string
	handles []*propHandle
	tokens  map[string]uint64 // highest token handed out per key
	// released are the handles whose owner's Release was called.
	released []*propHandle
	log      []string
	stats    *propStats
	pools    []int           // per node: its clients' PoolSize, 0 for go-redis's default
	dial     bool            // the clients are made by Dial (per-node queues), not New
	rcs      []*redis.Client // the node clients the clients made by New share
	// info: the nodes answer INFO server and memory (EmulateInfo), so the
	// clients read their incarnations (incarnation.go); a data loss is then
	// a restart with a new run_id or a flush in place.
	info bool
}

func runSchedule(t *rapid.T, n int, guard bool, stats *propStats) {
	m := &model{t: t, n: n, guard: guard, tokens: map[string]uint64{}, stats: stats}
	// The node clients' connection pools: go-redis's default (never full
	// here) or, for some nodes, 1 or 2 connections, so that a node that
	// lags behind sheds acquisitions (nodecall.Engine.EnterAcquire); and the clients made
	// by New over the schedule's node clients, or by Dial, whose per-node
	// queue (internal/nodecall: Queue) can drop a call that waited too long.
	m.pools = rapid.SliceOfN(rapid.SampledFrom([]int{0, 1, 2}), n, n).Draw(t, "pools")
	// Dial's clients only with REDLOCK_PROPS_DIAL set: there a schedule can
	// hang. A pub/sub connection's HELLO (notify.go) goes through the
	// node's queue and waits for a slot while go-redis holds the PubSub's
	// mutex; a Subscribe blocked on that mutex is not durably blocked, so
	// the bubble's clock stops and the calls holding the slots never end.
	m.dial = os.Getenv("REDLOCK_PROPS_DIAL") != "" && rapid.Bool().Draw(t, "dial")
	stats.add(func(s *propStats) {
		s.schedules++
		if m.dial {
			s.dialed++
		}
		if slices.ContainsFunc(m.pools, func(p int) bool { return p > 0 }) {
			s.smallPools++
		}
	})
	m.info = guard && rapid.Bool().Draw(t, "info")
	for i := range n {
		m.nodes = append(m.nodes, &propNode{testNode: newTestNode(t, i)})
		if m.info {
			m.nodes[i].EmulateInfo("noeviction")
		}
		m.installFaults(i)
	}
	t.Cleanup(func() {
		// Refused dials start go-redis's re-dial loop, which ends within a
		// second of the client's Close: let it end inside the bubble.
		for _, pn := range m.nodes {
			_ = pn.rc.Close()
		}
		for _, rc := range m.rcs {
			_ = rc.Close()
		}
		time.Sleep(2 * time.Second)
	})
	if !m.dial {
		for i, pn := range m.nodes {
			rc := pn.rc
			if m.pools[i] > 0 {
				o := *pn.rc.Options()
				o.PoolSize = m.pools[i]
				rc = redis.NewClient(&o)
			}
			m.rcs = append(m.rcs, rc)
		}
	}
	m.clients = []*redlock.Client{m.newClient(), m.newClient(), m.newClient()}
	m.keys = []string{"k0", "k1"}

	t.Repeat(map[string]func(*rapid.T){
		"": func(t *rapid.T) {
			m.stats.add(func(s *propStats) { s.steps++ })
			m.check()
		},
		"acquire":        m.acquire,
		"acquireTwo":     m.acquireTwo,
		"acquireBurst":   m.acquireBurst,
		"extend":         m.extend,
		"keepAlive":      m.keepAlive,
		"release":        m.release,
		"sleep":          m.sleep,
		"loseData":       m.loseData,
		"loseDataLate":   m.loseDataLate,
		"kill":           m.kill,
		"restart":        m.restart,
		"delayReply":     m.delayReply,
		"dropReply":      m.dropReply,
		"failScript":     m.failScript,
		"advanceClock":   m.advanceClock,
		"checkLiveness":  func(t *rapid.T) { m.liveness(rapid.SampledFrom(m.keys).Draw(t, "key")) },
		"releaseExpired": func(*rapid.T) { m.dropExpired() },
	})
	m.nothingLeftAfterClose()
	m.clients = []*redlock.Client{m.newClient()}
	for _, k := range m.keys {
		m.liveness(k)
	}
	m.boundedHistory()
}

// nothingLeftAfterClose releases every handle still held, closes the
// clients, and then, without waiting for anything else, requires that no
// node holds a released owner's key, except nodes down now or upset (a
// dropped reply, a failed call, a kill) since that owner's acquisition
// started: their calls may have failed or run out of order.
func (m *model) nothingLeftAfterClose() {
	m.t.Helper()
	for _, h := range m.live() {
		m.releaseHandle(h)
	}
	for _, cl := range m.clients {
		if err := cl.Close(); err != nil {
			m.fatalf("close: %v", err)
		}
	}
	for _, h := range m.released {
		for i, pn := range m.nodes {
			if pn.down || pn.upsetSince(h.start) {
				continue
			}
			if pn.Value(h.key) == h.lock.Owner() {
				m.fatalf("nothing left after Close: node %d still holds %s of token %d, released", i, h.key, h.lock.Token())
			}
		}
	}
}

// newClient returns a Client over the schedule's nodes: made by New over
// the node clients of the drawn pools (rcs), or by Dial with those pools
// (0: go-redis's default) and an in-memory dialer that honours Refuse.
// It is closed in t.Cleanup, before the nodes and their clients.
func (m *model) newClient() *redlock.Client {
	m.t.Helper()
	var (
		rl  *redlock.Client
		err error
	)
	if m.dial {
		urls := make([]string, m.n)
		for i, pn := range m.nodes {
			urls[i] = "redis://" + pn.addr
		}
		rl, err = redlock.DialWith(urls, func(i int, o *redis.Options) {
			if m.pools[i] > 0 {
				o.PoolSize = m.pools[i]
			}
			nd := m.nodes[i].testNode
			o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nd.dial() }
		}, m.options()...)
	} else {
		clients := make([]redis.UniversalClient, m.n)
		for i, rc := range m.rcs {
			clients[i] = rc
		}
		rl, err = redlock.New(clients, m.options()...)
	}
	if err != nil {
		m.t.Fatalf("new client: %v", err)
	}
	m.t.Cleanup(func() {
		if err := rl.Close(); err != nil {
			m.t.Errorf("close: %v", err)
		}
	})
	return rl
}

func (m *model) options() []redlock.Option {
	opts := []redlock.Option{redlock.WithRetention(propRetention)}
	if m.guard {
		opts = append(opts, redlock.WithQuarantine(propQuarantine))
	} else {
		opts = append(opts, redlock.WithoutAmnesiaGuard())
	}
	return opts
}

func (m *model) logf(format string, args ...any) {
	m.log = append(m.log, fmt.Sprintf("%v ", time.Now().Format("15:04:05.000"))+fmt.Sprintf(format, args...))
}

func (m *model) fatalf(format string, args ...any) {
	m.t.Helper()
	for _, l := range m.log {
		m.t.Log(l)
	}
	m.t.Fatalf(format, args...)
}

// installFaults makes node i run every script call propLatency late, plus
// the one-shot delay or failure the schedule set.
func (m *model) installFaults(i int) {
	pn := m.nodes[i]
	pn.mu.Lock()
	defer pn.mu.Unlock()
	pn.testNode.delay = func(cmd string, args []string) time.Duration {
		if cmd != "EVALSHA" && cmd != "EVAL" {
			return 0
		}
		pn.fmu.Lock()
		defer pn.fmu.Unlock()
		d := propLatency
		if pn.nextDelay.script != "" && isScript(pn.nextDelay.script, cmd, args) {
			d += pn.nextDelay.d
			if pn.nextDelay.d >= 100*time.Millisecond { // dropped
				pn.upset = time.Now()
				m.stats.add(func(s *propStats) { s.dropped++ })
			} else {
				m.stats.add(func(s *propStats) { s.late++ })
			}
			pn.nextDelay.script = ""
		}
		return d
	}
	pn.testNode.fail = func(cmd string, args []string) bool {
		pn.fmu.Lock()
		defer pn.fmu.Unlock()
		if pn.nextFail != "" && isScript(pn.nextFail, cmd, args) {
			pn.upset = time.Now()
			m.stats.add(func(s *propStats) { s.failed++ })
			pn.nextFail = ""
			return true
		}
		return false
	}
}

// record checks and records a new holder's token.
func (m *model) record(h *propHandle) {
	m.t.Helper()
	tok := h.lock.Token()
	if prev := m.tokens[h.key]; tok <= prev {
		m.fatalf("token order: %s got token %d, not above the earlier %d", h.key, tok, prev)
	}
	m.tokens[h.key] = tok
	m.handles = append(m.handles, h)
	m.stats.add(func(s *propStats) { s.acquired++ })
}

func (m *model) drawTTL(t *rapid.T) time.Duration {
	return rapid.SampledFrom(propTTLs).Draw(t, "ttl")
}

func (m *model) acquire(t *rapid.T) {
	cl := rapid.IntRange(0, len(m.clients)-1).Draw(t, "client")
	key := rapid.SampledFrom(m.keys).Draw(t, "key")
	ttl := m.drawTTL(t)
	try := rapid.Bool().Draw(t, "try")
	start := time.Now()
	var (
		l   *redlock.Lock
		err error
	)
	if try {
		l, err = m.clients[cl].TryAcquire(context.Background(), key, ttl)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		l, err = m.clients[cl].Acquire(ctx, key, ttl)
		cancel()
	}
	m.logf("client %d acquire %s ttl %v: %v", cl, key, ttl, errOrToken(l, err))
	if err == nil {
		m.record(&propHandle{key: key, lock: l, start: start})
	}
}

// acquireTwo has two clients try the same key at once.
func (m *model) acquireTwo(t *rapid.T) {
	key := rapid.SampledFrom(m.keys).Draw(t, "key")
	ttl := m.drawTTL(t)
	start := time.Now()
	var wg sync.WaitGroup
	locks := make([]*redlock.Lock, 2)
	for i := range 2 {
		wg.Go(func() {
			l, err := m.clients[i].TryAcquire(context.Background(), key, ttl)
			if err == nil {
				locks[i] = l
			}
		})
	}
	wg.Wait()
	got := slices.DeleteFunc(locks, func(l *redlock.Lock) bool { return l == nil })
	m.logf("two clients acquire %s: %d succeeded", key, len(got))
	if len(got) == 2 {
		m.fatalf("exclusion: two clients acquired %s at once", key)
	}
	for _, l := range got {
		m.record(&propHandle{key: key, lock: l, start: start})
	}
}

// acquireBurst has one client try every key in turn, back to back: each
// acquisition meets the calls of the one before still running on a node
// that lags (a late or dropped reply), which a small pool then sheds.
func (m *model) acquireBurst(t *rapid.T) {
	cl := rapid.IntRange(0, len(m.clients)-1).Draw(t, "client")
	ttl := m.drawTTL(t)
	for _, key := range m.keys {
		start := time.Now()
		l, err := m.clients[cl].TryAcquire(context.Background(), key, ttl)
		m.logf("client %d acquire %s ttl %v (burst): %v", cl, key, ttl, errOrToken(l, err))
		if err == nil {
			m.record(&propHandle{key: key, lock: l, start: start})
		}
	}
}

// live returns the handles not released.
func (m *model) live() []*propHandle {
	var hs []*propHandle
	for _, h := range m.handles {
		if !h.released {
			hs = append(hs, h)
		}
	}
	return hs
}

func (m *model) extend(t *rapid.T) {
	hs := slices.DeleteFunc(m.live(), func(h *propHandle) bool { return h.lease != nil })
	if len(hs) == 0 {
		t.Skip("no handle")
	}
	h := rapid.SampledFrom(hs).Draw(t, "handle")
	ttl := rapid.SampledFrom([]time.Duration{300 * time.Millisecond, time.Second, 3 * time.Second}).Draw(t, "ttl")
	l, err := h.lock.Extend(context.Background(), ttl)
	m.logf("extend %s token %d by %v: %v", h.key, h.lock.Token(), ttl, errOrToken(l, err))
	if err == nil {
		m.stats.add(func(s *propStats) { s.extended++ })
		// The old handle stays in the model with its own deadline.
		m.handles = append(m.handles, &propHandle{key: h.key, lock: l, start: h.start})
	}
}

func (m *model) keepAlive(t *rapid.T) {
	hs := slices.DeleteFunc(m.live(), func(h *propHandle) bool { return h.lease != nil || h.lock.Validity() <= 0 })
	if len(hs) == 0 {
		t.Skip("no valid handle")
	}
	h := rapid.SampledFrom(hs).Draw(t, "handle")
	lease, err := h.lock.KeepAlive(context.Background())
	m.logf("keep %s token %d alive: %v", h.key, h.lock.Token(), err)
	if err == nil {
		m.handles = append(m.handles, &propHandle{key: h.key, lock: h.lock, lease: lease, start: h.start})
	}
}

func (m *model) release(t *rapid.T) {
	hs := m.live()
	if len(hs) == 0 {
		t.Skip("no handle")
	}
	h := rapid.SampledFrom(hs).Draw(t, "handle")
	m.releaseHandle(h)
}

// releaseHandle releases h and marks every handle of its owner released.
func (m *model) releaseHandle(h *propHandle) {
	var err error
	if h.lease != nil {
		err = h.lease.Release(context.Background())
	} else {
		err = h.lock.Release(context.Background())
	}
	m.logf("release %s token %d: %v", h.key, h.lock.Token(), err)
	m.stats.add(func(s *propStats) { s.released++ })
	m.released = append(m.released, h)
	// Whatever the outcome, the holder has given the lock up.
	for _, o := range m.handles {
		if o.lock.Owner() == h.lock.Owner() {
			o.released = true
		}
	}
}

// dropExpired forgets handles whose validity ran out (their keys expire by
// themselves); a Lease among them is released.
func (m *model) dropExpired() {
	for _, h := range m.live() {
		if h.released || h.current().Validity() > 0 {
			continue
		}
		if h.lease != nil {
			// Releasing the Lease releases the lock: every handle of its
			// owner is given up.
			m.releaseHandle(h)
		}
		h.released = true
	}
}

func (m *model) sleep(t *rapid.T) {
	d := rapid.SampledFrom([]time.Duration{
		time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond,
		time.Second, 3 * time.Second, 30 * time.Second, propQuarantine + time.Second,
	}).Draw(t, "d")
	m.logf("sleep %v", d)
	time.Sleep(d)
}

// minority is the most nodes that may fail together: (N-1)/2.
func (m *model) minority() int { return (m.n - 1) / 2 }

// loseData empties a node, as a restart without persistence. Only with the
// guard on (off, the library promises nothing after a data loss), and
// within its limit (withinGuardLimit).
func (m *model) loseData(t *rapid.T) { m.wipe(t) }

// wipe is loseData; it returns the node.
func (m *model) wipe(t *rapid.T) int {
	if !m.guard {
		t.Skip("guard off: no data loss")
	}
	i := rapid.IntRange(0, m.n-1).Draw(t, "node")
	if !m.withinGuardLimit(i, true) {
		t.Skip("a minority already lost data in this quarantine or is down")
	}
	// A restart without persistence: the node is down, comes back empty,
	// and a restart takes time (propRestart; docs/fencing.md, assumption C).
	// Not an upset for checkVouched: a node that lost our key is not
	// checked, and one that lost its data before our grant must be vouched.
	pn := m.nodes[i]
	if m.info && !pn.down && rapid.Bool().Draw(t, "flush in place") {
		// FLUSHALL on a running node: the same run_id, its marker gone.
		pn.m.FlushAll()
		pn.wipes = append(pn.wipes, time.Now())
		m.stats.add(func(s *propStats) { s.lost++ })
		m.logf("node %d is flushed", i)
		return i
	}
	if !pn.down {
		pn.Refuse()
		pn.down = true
	}
	pn.m.FlushAll()
	if m.info {
		pn.EmulateInfo("noeviction") // a new run_id, uptime 0
	}
	pn.back = time.Now().Add(propRestart)
	pn.wipes = append(pn.wipes, time.Now())
	m.stats.add(func(s *propStats) { s.lost++ })
	m.logf("node %d loses its data", i)
	return i
}

// loseDataLate is loseData plus a late reply to the node's next acquire
// call: the schedules where a node that lost its data grants after
// the vote was decided (it must still be vouched for).
func (m *model) loseDataLate(t *rapid.T) {
	i := m.wipe(t)
	pn := m.nodes[i]
	pn.fmu.Lock()
	pn.nextDelay.script, pn.nextDelay.d = "acquire", 10*time.Millisecond
	pn.fmu.Unlock()
	m.logf("node %d: next acquire call 10ms late", i)
}

// withinGuardLimit reports whether node i may fail (lose its data when
// wipe, else go down or leave its next acquire call unanswered) within the
// amnesia guard's limit: while some node lost its data in the last
// quarantine, the nodes that did, together with those down and those whose
// next acquire call is to fail or time out (unreachable for that vote),
// stay a minority. (Beyond it a key can look brand new:
// TestAmnesiaGuard_MajorityEmptiedOrDownLooksBrandNew,
// TestAmnesiaGuard_EmptiedAndTimedOutMajorityLooksBrandNew.) Guard off, no
// data is lost and nodes may go down freely.
func (m *model) withinGuardLimit(i int, wipe bool) bool {
	if !m.guard {
		return true
	}
	faulty, wiped := map[int]bool{i: true}, wipe
	for j, pn := range m.nodes {
		if pn.down || pn.acquireUnanswered() {
			faulty[j] = true
		}
		for _, w := range pn.wipes {
			if time.Since(w) < propQuarantine {
				faulty[j], wiped = true, true
			}
		}
	}
	return !wiped || len(faulty) <= m.minority()
}

func (m *model) kill(t *rapid.T) {
	i := rapid.IntRange(0, m.n-1).Draw(t, "node")
	if m.nodes[i].down {
		t.Skip("already down")
	}
	if !m.withinGuardLimit(i, false) {
		t.Skip("beyond the guard's limit")
	}
	m.nodes[i].Refuse()
	m.nodes[i].down = true
	m.nodes[i].setUpset()
	m.stats.add(func(s *propStats) { s.killed++ })
	m.logf("node %d killed", i)
}

func (m *model) restart(t *rapid.T) {
	var down []int
	for i, pn := range m.nodes {
		if pn.down {
			down = append(down, i)
		}
	}
	if len(down) == 0 {
		t.Skip("none down")
	}
	m.revive(rapid.SampledFrom(down).Draw(t, "node"))
}

// revive restarts a killed node with its data (a node that lost its data
// once its restart time has passed).
func (m *model) revive(i int) {
	pn := m.nodes[i]
	if d := time.Until(pn.back); d > 0 {
		time.Sleep(d)
	}
	pn.Revive(m.t)
	pn.down = false
	m.logf("node %d restarted", i)
}

// propScripts are the scripts a fault can hit; acquire's calls, the ones
// whose late replies matter most, are drawn more often.
var propScripts = []string{"acquire", "acquire", "acquire", "fence", "extend", "reput", "release", "abandon", "release-vouch"}

// delayReply makes one node's next call of one script answer after the vote
// is decided (within the per-node timeout).
func (m *model) delayReply(t *rapid.T) {
	m.setDelay(t, 10*time.Millisecond)
}

// dropReply makes one node's next call of one script time out; the node
// still runs it, later.
func (m *model) dropReply(t *rapid.T) {
	m.setDelay(t, 100*time.Millisecond)
}

func (m *model) setDelay(t *rapid.T, d time.Duration) {
	i := rapid.IntRange(0, m.n-1).Draw(t, "node")
	s := rapid.SampledFrom(propScripts).Draw(t, "script")
	if s == "acquire" && d >= 100*time.Millisecond && !m.withinGuardLimit(i, false) {
		t.Skip("beyond the guard's limit")
	}
	pn := m.nodes[i]
	pn.fmu.Lock()
	pn.nextDelay.script, pn.nextDelay.d = s, d
	pn.fmu.Unlock()
	m.logf("node %d: next %s call %v late", i, s, d)
}

func (m *model) failScript(t *rapid.T) {
	i := rapid.IntRange(0, m.n-1).Draw(t, "node")
	s := rapid.SampledFrom(propScripts).Draw(t, "script")
	if s == "acquire" && !m.withinGuardLimit(i, false) {
		t.Skip("beyond the guard's limit")
	}
	pn := m.nodes[i]
	pn.fmu.Lock()
	pn.nextFail = s
	pn.fmu.Unlock()
	m.logf("node %d: next %s call fails", i, s)
}

// advanceClock runs one node's expiry clock ahead, within the drift budget:
// over any window of the longest TTL (extensions included), a node's keys
// lose at most the drift allowance of the shortest TTL.
func (m *model) advanceClock(t *rapid.T) {
	i := rapid.IntRange(0, m.n-1).Draw(t, "node")
	budget := redlock.Drift(300*time.Millisecond, redlock.DefaultDriftFactor) - time.Millisecond
	pn := m.nodes[i]
	used := time.Duration(0)
	for _, f := range pn.ffs {
		if time.Since(f.at) < 2*3*time.Second {
			used += f.d
		}
	}
	d := time.Duration(rapid.IntRange(1, int(budget/time.Millisecond)).Draw(t, "ms")) * time.Millisecond
	if used+d > budget {
		t.Skip("drift budget used")
	}
	pn.m.FastForward(d)
	pn.ffs = append(pn.ffs, ffRecord{time.Now(), d})
	m.stats.add(func(s *propStats) { s.clock++ })
	m.logf("node %d clock +%v", i, d)
}

// check runs after every step.
func (m *model) check() {
	m.t.Helper()
	synctest.Wait()
	quorum := m.n/2 + 1
	for _, key := range m.keys {
		owners := map[string]*propHandle{}
		for _, h := range m.live() {
			if h.key != key {
				continue
			}
			l := h.current()
			if l.Validity() <= 0 {
				continue
			}
			owners[l.Owner()] = h
			on, lost := 0, 0
			for _, pn := range m.nodes {
				switch {
				case pn.Value(l.Key()) == l.Owner():
					on++
				case slices.ContainsFunc(pn.wipes, func(w time.Time) bool { return !w.Before(h.start) }):
					lost++ // the guard's case: lost since the grant
				}
			}
			if on+lost < quorum {
				var seen []string
				for i, pn := range m.nodes {
					seen = append(seen, fmt.Sprintf("node %d: %q ttl %v", i, pn.Value(l.Key()), pn.m.TTL(l.Key())))
				}
				m.fatalf("exclusion: %s token %d valid for %v but on %d nodes (+%d that lost data), %d needed %v",
					key, l.Token(), l.Validity(), on, lost, quorum, seen)
			}
		}
		if len(owners) > 1 {
			m.fatalf("exclusion: %d owners of %s hold valid handles at once", len(owners), key)
		}
		if m.guard {
			for _, h := range owners {
				m.checkVouched(h)
			}
		}
	}
}

// checkVouched: with the guard on, every node that holds a valid holder's
// key has a trusted epoch once the holder's follow-ups had time to land
// (50 ms), however late the node's grant was, unless a reply was dropped,
// a call failed, or a node was killed since the acquisition.
func (m *model) checkVouched(h *propHandle) {
	m.t.Helper()
	l := h.current()
	if time.Since(l.AcquiredAt()) < 50*time.Millisecond {
		return
	}
	for _, pn := range m.nodes {
		if pn.upsetSince(h.start) {
			return
		}
	}
	for i, pn := range m.nodes {
		if pn.Value(l.Key()) == l.Owner() && pn.m.HGet(epochName(l.Key()), "trusted") != "1" {
			m.fatalf("vouching: node %d holds %s (token %d) but is not trusted", i, l.Key(), l.Token())
		}
	}
}

func epochName(key string) string { return "{" + key + "}:epoch" }

// heal ends every fault: nodes restarted, one-shot faults cleared.
func (m *model) heal() {
	for i, pn := range m.nodes {
		if pn.down {
			m.revive(i)
		}
		pn.fmu.Lock()
		pn.nextDelay.script, pn.nextFail = "", ""
		pn.fmu.Unlock()
	}
}

// liveness: with the faults healed, key is acquired within one quarantine
// plus one TTL (the keys of holders that are gone expire meanwhile).
func (m *model) liveness(key string) {
	m.t.Helper()
	for _, h := range m.live() {
		if h.key == key {
			m.releaseHandle(h)
		}
	}
	m.heal()
	m.stats.add(func(s *propStats) { s.liveness++ })
	deadline := time.Now().Add(propQuarantine + 3*time.Second)
	for {
		start := time.Now()
		l, err := m.clients[0].TryAcquire(context.Background(), key, time.Second)
		if err == nil {
			m.logf("liveness: %s acquired, token %d", key, l.Token())
			m.record(&propHandle{key: key, lock: l, start: start})
			m.releaseHandle(m.handles[len(m.handles)-1])
			return
		}
		if time.Now().After(deadline) {
			m.fatalf("liveness: %s not acquired within a quarantine: %v", key, err)
		}
		time.Sleep(5 * time.Second)
	}
}

// boundedHistory: once every name is idle for the retention, the nodes hold
// nothing, and a later holder's token is still higher.
func (m *model) boundedHistory() {
	m.t.Helper()
	for _, h := range m.live() {
		m.releaseHandle(h)
	}
	m.heal()
	time.Sleep(propRetention + 3*time.Second)
	for i, pn := range m.nodes {
		// The node's marker and its records of the other nodes'
		// incarnations stay: a fixed number per node, not per name.
		keys := slices.DeleteFunc(pn.m.Keys(), func(k string) bool {
			return k == "redlock:marker" || strings.HasPrefix(k, "redlock:inc:")
		})
		if len(keys) > 0 {
			m.fatalf("bounded history: node %d still holds %v after the retention", i, keys)
		}
	}
	for _, key := range m.keys {
		m.liveness(key)
	}
}

func errOrToken(l *redlock.Lock, err error) string {
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("token %d, valid %v", l.Token(), l.Validity())
}
