package redlock_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// testNode is one in-memory Redis master for tests run inside a
// testing/synctest bubble: a miniredis whose TTLs follow the bubble's fake
// clock (ClockTTL), reached by a go-redis client over net.Pipe (no socket, no
// host lookup). Faults are verbs on it: Slow, SlowAcquire, Refuse, Fail.
type testNode struct {
	m    *miniredis.Miniredis
	rc   *redis.Client
	addr string // a literal IP:port: names the node, never dialed

	refused atomic.Bool
	dials   atomic.Int64             // dial calls, refused ones included
	replies atomic.Int64             // DelayReplies: ns each reply waits before the client can read it
	srvMu   sync.Mutex               // orders dial's ServeConn against Refuse's Close
	srv     *server.Server           // nil while refused; srvMu
	info    atomic.Pointer[nodeInfo] // EmulateInfo; nil: INFO server is an error, as in miniredis
	mu      sync.Mutex
	delay   func(cmd string, args []string) time.Duration // nil: no delay
	fail    func(cmd string, args []string) bool          // nil: no injected error
}

// errRefused is what a refusing node's dialer returns: a dial error that
// is neither a timeout nor a Redis error reply.
var errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

// newTestNode starts node number i (its address is 127.0.0.1:7001+i). Its
// client, then its server, are closed in t.Cleanup, which a bubble runs
// inside the bubble.
func newTestNode(t testTB, i int) *testNode {
	t.Helper()
	// go-redis keeps the timers of commands that waited for a free pooled
	// connection in a global sync.Pool (internal.semTimers): a timer made
	// in an earlier test's (or schedule's) synctest bubble is fatal in this
	// one ("select on synctest channel from outside bubble"). Two
	// collections empty the pool (one moves it to the victim cache).
	runtime.GC()
	runtime.GC()
	n := &testNode{m: miniredis.NewMiniRedis(), addr: fmt.Sprintf("127.0.0.1:%d", 7001+i)}
	n.m.ClockTTL(true)
	n.start(t)
	n.rc = redis.NewClient(&redis.Options{
		Addr: n.addr,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return n.dial()
		},
		MaxRetries:            -1,
		DialerRetries:         1, // a refused node fails at once, as with Dial
		ContextTimeoutEnabled: true,
		Protocol:              2,
		DisableIdentity:       true,
	})
	t.Cleanup(func() {
		_ = n.rc.Close()
		n.m.Close()
	})
	return n
}

// installHook makes the node run each command after the delay its delay
// function asks for. In a bubble the sleep is fake time, and it holds only
// the connection that sent the command (miniredis serves connections
// concurrently).
func (n *testNode) installHook() {
	n.m.Server().SetPreHook(func(peer *server.Peer, cmd string, args ...string) bool {
		n.mu.Lock()
		f, fail := n.delay, n.fail
		n.mu.Unlock()
		// The pub/sub connection that wakes waiters (notify.go) is never
		// delayed: go-redis holds its PubSub's mutex while it writes
		// SUBSCRIBE or PING, and a goroutine blocked on a mutex stops a
		// synctest bubble's clock, so the delay would never end.
		if f != nil && !pubsubCmd[cmd] {
			if d := f(cmd, args); d > 0 {
				time.Sleep(d)
			}
		}
		if fail != nil && fail(cmd, args) {
			peer.WriteError("ERR injected by the test")
			return true
		}
		if in := n.info.Load(); in != nil && strings.EqualFold(cmd, "INFO") && len(args) == 1 {
			switch strings.ToLower(args[0]) {
			case "server":
				peer.WriteBulk(fmt.Sprintf("# Server\r\nredis_version:7.0.0\r\nrun_id:%s\r\nuptime_in_seconds:%d\r\n",
					in.runID, int64(time.Since(in.started)/time.Second)))
				return true
			case "memory":
				peer.WriteBulk("# Memory\r\nmaxmemory_policy:" + in.policy + "\r\n")
				return true
			}
		}
		return false
	})
}

// nodeInfo is what an emulated INFO answers (EmulateInfo).
type nodeInfo struct {
	runID   string
	started time.Time
	policy  string
}

// EmulateInfo makes the node answer INFO server (a run_id, and the uptime
// since now) and INFO memory (maxmemory_policy policy), which miniredis
// does not: a new run_id, as a restarted server would have.
func (n *testNode) EmulateInfo(policy string) {
	n.info.Store(&nodeInfo{runID: fmt.Sprintf("%040x", rand.Uint64()), started: time.Now(), policy: policy})
}

// RestartEmpty is a restart that lost every key: the data are flushed, the
// node answers with a new run_id and uptime 0, and its connections are
// closed.
func (n *testNode) RestartEmpty(t testTB) {
	t.Helper()
	in := n.info.Load()
	n.Refuse()
	n.m.FlushAll()
	if in != nil {
		n.EmulateInfo(in.policy)
	}
	n.Revive(t)
}

var pubsubCmd = map[string]bool{"SUBSCRIBE": true, "UNSUBSCRIBE": true, "PING": true}

// FailIf makes the node answer the commands that match with an error
// reply, without running them; nil stops it.
func (n *testNode) FailIf(match func(cmd string, args []string) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.fail = match
}

// Slow delays every script call (all the library sends) by d before the
// node runs it. Commands that a script issues inside the node are not
// delayed: miniredis runs them through the same hook while it holds its
// lock, and sleeping there would freeze the whole node.
func (n *testNode) Slow(d time.Duration) {
	n.SlowIf(d, func(cmd string, _ []string) bool { return cmd == "EVALSHA" || cmd == "EVAL" })
}

// SlowAcquire delays only three-key scripts (the acquire script, and the
// fencing write-back when fencing is on) by d: a release or extend sent
// after such a command runs before it.
func (n *testNode) SlowAcquire(d time.Duration) {
	n.SlowIf(d, func(cmd string, args []string) bool {
		return (cmd == "EVALSHA" || cmd == "EVAL") && len(args) > 1 && args[1] == "3"
	})
}

// SlowScripts delays the calls of the library's scripts with these names
// (keys of redlock.ScriptHashes) by d.
func (n *testNode) SlowScripts(d time.Duration, names ...string) {
	for _, name := range names {
		if _, ok := redlock.ScriptHashes[name]; !ok {
			panic("SlowScripts: no script named " + name)
		}
	}
	n.SlowIf(d, func(cmd string, args []string) bool {
		for _, name := range names {
			if isScript(name, cmd, args) {
				return true
			}
		}
		return false
	})
}

// SlowIf delays the commands that match by d.
func (n *testNode) SlowIf(d time.Duration, match func(cmd string, args []string) bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = func(cmd string, args []string) time.Duration {
		if match(cmd, args) {
			return d
		}
		return 0
	}
}

// DelayReplies makes every reply the node writes from now on reach its
// client d later (the command has run at once), on the connections that
// dial makes (newCluster's clients, not dialCluster's).
func (n *testNode) DelayReplies(d time.Duration) { n.replies.Store(int64(d)) }

// Refuse makes the node unreachable: new dials are refused and the server
// closes its open connections. Its data stays readable through n.m.
func (n *testNode) Refuse() {
	n.refused.Store(true)
	n.srvMu.Lock()
	n.srv = nil
	n.srvMu.Unlock()
	n.m.Close()
}

// Revive undoes Refuse: the node serves again, with the data it had.
func (n *testNode) Revive(t testTB) {
	t.Helper()
	n.start(t)
	n.refused.Store(false)
}

// start starts the node's in-memory server (miniredis's first Dial does)
// and installs the pre-hook on it.
func (n *testNode) start(t testTB) {
	t.Helper()
	conn, err := n.m.Dial()
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	n.srvMu.Lock()
	n.srv = n.m.Server()
	n.srvMu.Unlock()
	n.installHook()
}

// dial connects a client to the node: an in-memory pipe whose server end
// buffers what the server writes (see serverConn), or errRefused while the
// node is refused.
func (n *testNode) dial() (net.Conn, error) {
	n.dials.Add(1)
	if n.refused.Load() {
		return nil, errRefused
	}
	n.srvMu.Lock()
	defer n.srvMu.Unlock()
	if n.srv == nil {
		return nil, errRefused
	}
	c, s := net.Pipe()
	n.srv.ServeConn(newServerConn(s, &n.replies))
	return c, nil
}

// serverConn is the server's end of an in-memory pipe whose writes never
// block: they are queued and a goroutine of its own copies them into the
// pipe, as a socket's send buffer would. A bare net.Pipe write waits for the
// client to read, and miniredis writes (Peer.Flush, and the pub/sub
// goroutine's Peer.Block) while holding the connection's sync.Mutex. When
// the client does not read for a while (go-redis's pub/sub reader sleeps
// 100 ms after a failed read; that sleep is fake time in a synctest bubble),
// a second writer blocked on that mutex is not durably blocked, so the
// bubble's clock stops and the sleep never ends: the test hangs.
type serverConn struct {
	net.Conn
	delay  *atomic.Int64 // ns each write waits before it is copied out
	mu     sync.Mutex
	queued []outChunk
	closed bool
	// quick is set while the commands last read are a connection's set-up
	// or pub/sub commands (quickCmd): their replies are never delayed.
	// go-redis holds its PubSub's mutex while it sets up a connection
	// (HELLO) and writes SUBSCRIBE or PING, and a goroutine blocked on that
	// mutex stops the bubble's clock, so a delayed reply would never come.
	quick bool
	more  chan struct{} // buffered: queued is not empty
	done  chan struct{} // closed by Close
}

// outChunk is one write, and when the client may read it.
type outChunk struct {
	b  []byte
	at time.Time
}

func newServerConn(c net.Conn, delay *atomic.Int64) *serverConn {
	s := &serverConn{Conn: c, delay: delay, more: make(chan struct{}, 1), done: make(chan struct{})}
	go s.copyOut()
	return s
}

// Write queues p for the client and returns at once.
func (s *serverConn) Write(p []byte) (int, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return 0, net.ErrClosed
	}
	at := time.Now()
	if !s.quick {
		at = at.Add(time.Duration(s.delay.Load()))
	}
	s.queued = append(s.queued, outChunk{b: append([]byte(nil), p...), at: at})
	s.mu.Unlock()
	select {
	case s.more <- struct{}{}:
	default:
	}
	return len(p), nil
}

// Read reads the client's commands, noting whether all of them are
// quickCmd ones (quick).
func (s *serverConn) Read(p []byte) (int, error) {
	n, err := s.Conn.Read(p)
	if n > 0 {
		q := onlyQuickCommands(p[:n])
		s.mu.Lock()
		s.quick = q
		s.mu.Unlock()
	}
	return n, err
}

// quickCmd are the commands whose replies serverConn never delays: a
// connection's set-up and pub/sub.
var quickCmd = map[string]bool{"HELLO": true, "CLIENT": true, "SELECT": true, "AUTH": true,
	"SUBSCRIBE": true, "UNSUBSCRIBE": true, "PSUBSCRIBE": true, "PUNSUBSCRIBE": true, "PING": true}

// onlyQuickCommands reports whether b holds whole RESP commands, each a
// quickCmd one.
func onlyQuickCommands(b []byte) bool {
	line := func() (string, bool) {
		i := bytes.Index(b, []byte("\r\n"))
		if i < 0 {
			return "", false
		}
		l := string(b[:i])
		b = b[i+2:]
		return l, true
	}
	if len(b) == 0 {
		return false
	}
	for len(b) > 0 {
		h, ok := line()
		if !ok || len(h) < 2 || h[0] != '*' {
			return false
		}
		count, err := strconv.Atoi(h[1:])
		if err != nil || count < 1 {
			return false
		}
		for k := range count {
			h, ok := line()
			if !ok || len(h) < 2 || h[0] != '$' {
				return false
			}
			size, err := strconv.Atoi(h[1:])
			if err != nil || size < 0 || len(b) < size+2 {
				return false
			}
			if k == 0 && !quickCmd[strings.ToUpper(string(b[:size]))] {
				return false
			}
			b = b[size+2:]
		}
	}
	return true
}

// copyOut writes what was queued into the pipe, in order, each write no
// sooner than its delay allows, until Close.
func (s *serverConn) copyOut() {
	for {
		select {
		case <-s.more:
		case <-s.done:
			return
		}
		s.mu.Lock()
		queued := s.queued
		s.queued = nil
		s.mu.Unlock()
		for _, ch := range queued {
			if wait := time.Until(ch.at); wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-t.C:
				case <-s.done:
					t.Stop()
					return
				}
			}
			if _, err := s.Conn.Write(ch.b); err != nil {
				return
			}
		}
	}
}

// Close closes the pipe (what is still queued is lost, as with a killed
// host) and ends copyOut.
func (s *serverConn) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	return s.Conn.Close()
}

// Fail makes the node answer every command with a Redis error reply.
func (n *testNode) Fail(msg string) { n.m.SetError(msg) }

// Has reports whether key exists on the node (expired keys do not).
func (n *testNode) Has(key string) bool { return n.m.Exists(key) }

// Value returns key's value on the node, "" when it does not exist.
func (n *testNode) Value(key string) string {
	v, err := n.m.Get(key)
	if err != nil {
		return ""
	}
	return v
}

// testTB is what the cluster helpers need of a test: a *testing.T, or a
// *rapid.T inside rapid.SyncTest (props_test.go).
type testTB interface {
	Helper()
	Cleanup(func())
	Errorf(format string, args ...any)
	FailNow()
}

// noGuard turns the amnesia guard off, for tests of a fresh key's vote at
// the majority (stragglers, a slow minority, counts of calls): with the
// guard, the default, a key's first use waits for every node's answer, up
// to the per-node timeout (guard_test.go).
var noGuard = redlock.WithoutAmnesiaGuard()

// cluster is N test nodes and a redlock Client over them.
type cluster struct {
	nodes []*testNode
	rl    *redlock.Client
}

// newCluster starts n nodes and a Client over them (built with New, so the
// node clients stay ours and are closed after the Client).
func newCluster(t testTB, n int, opts ...redlock.Option) *cluster {
	t.Helper()
	c := &cluster{}
	clients := make([]redis.UniversalClient, n)
	for i := range n {
		nd := newTestNode(t, i)
		c.nodes = append(c.nodes, nd)
		clients[i] = nd.rc
	}
	rl, err := redlock.New(clients, opts...)
	require.NoError(t, err)
	// Registered after the nodes' clean-ups, so it runs before them.
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	c.rl = rl
	return c
}

// clients returns the nodes' go-redis clients.
func (c *cluster) clients() []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.rc
	}
	return out
}

// newWarmCluster is newCluster followed by warmUp: a delay or fault the
// test installs next applies to the script call itself. It must run inside
// a synctest bubble.
func newWarmCluster(t testTB, n int, opts ...redlock.Option) *cluster {
	t.Helper()
	c := newCluster(t, n, opts...)
	c.warmUp(t)
	return c
}

// warmUp loads every script on every node, then takes, extends and
// releases a throw-away lock, so that a delay installed later applies to the
// script call itself and not to a NOSCRIPT round trip first. It must run
// inside a synctest bubble: it waits for the stragglers' calls too.
func (c *cluster) warmUp(t testTB) {
	t.Helper()
	ctx := context.Background()
	for _, nd := range c.nodes {
		require.NoError(t, redlock.LoadScripts(ctx, nd.rc))
	}
	l, err := c.rl.TryAcquire(ctx, "warm-up", 10*time.Second)
	require.NoError(t, err)
	l, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	synctest.Wait()
}

// useKey gives key the history a key in use has: one acquisition and
// release on every node, so that with the amnesia guard (the default) every
// node's epoch for it is trusted and the next acquisition decides at the
// majority like any other. It must run inside a synctest bubble.
func (c *cluster) useKey(t testTB, key string) {
	t.Helper()
	ctx := context.Background()
	l, err := c.rl.TryAcquire(ctx, key, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	synctest.Wait()
}

// endRedials closes the go-redis clients of the given nodes and waits for
// their background re-dial loops to end: refused dials start such a loop,
// which ends within a second of the client's Close, and it must end inside
// the synctest bubble.
func (c *cluster) endRedials(nodes ...int) {
	for _, i := range nodes {
		_ = c.nodes[i].rc.Close()
	}
	time.Sleep(2 * time.Second)
}

// holders returns how many nodes hold key.
func (c *cluster) holders(key string) int {
	k := 0
	for _, n := range c.nodes {
		if n.Has(key) {
			k++
		}
	}
	return k
}

// requireNoKey fails unless no node holds key.
func (c *cluster) requireNoKey(t testing.TB, key string) {
	t.Helper()
	for i, n := range c.nodes {
		require.False(t, n.Has(key), "node %d (%s) still holds %q = %q", i, n.addr, key, n.Value(key))
	}
}

// requireGone waits for the node calls still running (synctest.Wait: the
// deletes Release did not wait for, an acquisition's stragglers), then
// requires that no node holds key. It must run inside a synctest bubble.
func (c *cluster) requireGone(t testing.TB, key string) {
	t.Helper()
	synctest.Wait()
	c.requireNoKey(t, key)
}

// releaseAndRequireGone requires r (a Lock or a Lease) to release, then
// requireGone: once the deletes Release did not wait for have ended, no
// node holds key.
func (c *cluster) releaseAndRequireGone(t testing.TB, ctx context.Context, r interface{ Release(context.Context) error }, key string) {
	t.Helper()
	require.NoError(t, r.Release(ctx))
	c.requireGone(t, key)
}

// holdElsewhere sets key to another owner's value with ttl on the given
// nodes, as if another client held the lock there.
func (c *cluster) holdElsewhere(t testing.TB, key string, ttl time.Duration, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		require.NoError(t, c.nodes[i].m.Set(key, "someone-else"))
		c.nodes[i].m.SetTTL(key, ttl)
	}
}

// outcomes lists the outcome of each node result, in node order.
func outcomes(rs []redlock.NodeResult) []redlock.Outcome {
	out := make([]redlock.Outcome, len(rs))
	for i, r := range rs {
		out[i] = r.Outcome
	}
	return out
}

// isTimeout reports whether err says a node call ran out of time: the
// per-node context's deadline, or the connection's deadline it set.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// quorumError requires err to be a *QuorumError and returns it.
func quorumError(t testing.TB, err error) *redlock.QuorumError {
	t.Helper()
	require.Error(t, err)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe, "want a *QuorumError, got %T: %v", err, err)
	return qe
}

// isScript reports whether a command a node received runs the library's
// script name (a key of redlock.ScriptHashes), by EVALSHA or by EVAL.
func isScript(name, cmd string, args []string) bool {
	if len(args) == 0 {
		return false
	}
	want := redlock.ScriptHashes[name]
	switch cmd {
	case "EVALSHA":
		return args[0] == want
	case "EVAL":
		sum := sha1.Sum([]byte(args[0]))
		return hex.EncodeToString(sum[:]) == want
	}
	return false
}

// firstToken is the fencing token of the first holder of a fresh key whose
// acquisition started at start, on nodes whose clocks agree with the
// client's: the counters are seeded with the client's proposal, its clock in
// microseconds, and incremented once.
func firstToken(start time.Time) uint64 {
	return uint64(start.UnixMicro()) + 1
}

// requireDecidedBy requires a Release's node results to show at least
// quorum nodes with outcome want, and the others with want too or still
// pending: Release returns once a majority decided, before the last
// answers.
func requireDecidedBy(t testing.TB, rs []redlock.NodeResult, want redlock.Outcome, quorum int) {
	t.Helper()
	n := 0
	for i, r := range rs {
		switch r.Outcome {
		case want:
			n++
		case redlock.OutcomePending:
		default:
			t.Errorf("node %d: outcome %v, want %v or pending", i, r.Outcome, want)
		}
	}
	require.GreaterOrEqual(t, n, quorum, "nodes that answered %v: %v", want, outcomes(rs))
}

// acquire takes key with Acquire and requires it to succeed.
func (c *cluster) acquire(t testing.TB, ctx context.Context, key string, ttl time.Duration, opts ...redlock.Option) *redlock.Lock {
	t.Helper()
	l, err := c.rl.Acquire(ctx, key, ttl, opts...)
	require.NoError(t, err)
	return l
}

// acquireSettled is acquire followed by synctest.Wait: the calls Acquire
// did not wait for (the stragglers' grants) have ended too, so every node
// that granted the lock holds it. It must run inside a synctest bubble.
func (c *cluster) acquireSettled(t testing.TB, ctx context.Context, key string, ttl time.Duration, opts ...redlock.Option) *redlock.Lock {
	t.Helper()
	l := c.acquire(t, ctx, key, ttl, opts...)
	synctest.Wait()
	return l
}

// tryAcquire takes key with TryAcquire (one attempt) and requires it to
// succeed.
func (c *cluster) tryAcquire(t testing.TB, ctx context.Context, key string, ttl time.Duration, opts ...redlock.Option) *redlock.Lock {
	t.Helper()
	l, err := c.rl.TryAcquire(ctx, key, ttl, opts...)
	require.NoError(t, err)
	return l
}

// lateCluster is 3 test nodes and a Client over them made by New, or by
// Dial over the nodes' own connections (DelayReplies works on both), with
// scripts loaded and each node's connection pool warmed by one lock.
func lateCluster(t *testing.T, dial bool, opts ...redlock.Option) ([]*testNode, *redlock.Client) {
	t.Helper()
	if !dial {
		c := newWarmCluster(t, 3, opts...)
		return c.nodes, c.rl
	}
	nodes := make([]*testNode, 3)
	urls := make([]string, 3)
	for i := range nodes {
		nodes[i] = newTestNode(t, i)
		urls[i] = "redis://" + nodes[i].addr
		require.NoError(t, redlock.LoadScripts(context.Background(), nodes[i].rc))
	}
	rl, err := redlock.DialWith(urls, func(i int, o *redis.Options) {
		o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nodes[i].dial() }
	}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	l, err := rl.TryAcquire(context.Background(), "warm-up", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	synctest.Wait()
	return nodes, rl
}

// slowCommands makes node n run every command a client sends it (a new
// connection's handshake included, not the commands of its scripts) d late.
func slowCommands(n *testNode, d time.Duration) {
	n.SlowIf(d, func(cmd string, _ []string) bool { return cmd == "EVALSHA" || cmd == "EVAL" || cmd == "HELLO" })
}

// newClientOver is another process's Client (New) over the nodes' clients.
func newClientOver(t *testing.T, nodes []*testNode) *redlock.Client {
	t.Helper()
	clients := make([]redis.UniversalClient, len(nodes))
	for i, nd := range nodes {
		clients[i] = nd.rc
	}
	rl, err := redlock.New(clients)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	return rl
}

// doOptions returns opts then hold as the options of a call that acquires
// and holds (Do, CheckTTL, ...).
func doOptions(opts []redlock.Option, hold ...redlock.HoldOption) []redlock.DoOption {
	out := make([]redlock.DoOption, 0, len(opts)+len(hold))
	for _, o := range opts {
		out = append(out, o)
	}
	for _, h := range hold {
		out = append(out, h)
	}
	return out
}
