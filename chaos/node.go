package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Errors returned by Cluster and Node. Test them with errors.Is.
var (
	// ErrClosed is returned by a Node or Cluster method called after
	// Cluster.Close.
	ErrClosed = errors.New("chaos: cluster closed")
	// ErrNeedsPersistence is returned by Node.Restart on the redis-server
	// backend without ClusterOptions.Persistence: a real server restarted
	// without an AOF cannot keep its data (use RestartAmnesia).
	ErrNeedsPersistence = errors.New("chaos: restart keeping data needs ClusterOptions.Persistence on the redis-server backend")
	// ErrUnsupported is returned for a fault the backend cannot produce, such
	// as a clock stepping back in-process, or a clock rate below 1 on the
	// redis-server backend with emulated clocks (ClockEmulated).
	ErrUnsupported = errors.New("chaos: fault not supported by this backend")
	// ErrNodeDown is returned by a fault that needs a running server (Pause)
	// on a node that was killed and not restarted.
	ErrNodeDown = errors.New("chaos: node is killed")
	// ErrNodePaused is returned by Cluster.FlushAll (and by the harness's
	// own key scans) when a node is paused: a command sent to it would wait
	// for the end of the pause, or run after the call gave up. Call HealAll
	// first.
	ErrNodePaused = errors.New("chaos: node is paused")
	// ErrInvalidFault is returned for a fault with bad arguments: a pause
	// that is not positive, a clock rate that is not a positive finite
	// number.
	ErrInvalidFault = errors.New("chaos: invalid fault argument")
)

// adminTimeout bounds each command the harness itself sends to a node's
// server (reading keys, FlushAll, clock emulation on redis-server). It is
// long: the harness's own reads must not fail a long run on a machine loaded
// far past its cores (a 2 s bound did, once in a 300-trial run at load 30),
// and a healthy server answers them in microseconds.
const adminTimeout = 10 * time.Second

// rateTick is how often the redis-server backend with emulated clocks
// applies a clock rate above 1 to the keys (see Node.SetClockRate).
const rateTick = 5 * time.Millisecond

// nodeClock is a node's clock: real time plus an offset that grows at
// (rate − 1) × real time. It is safe for concurrent use.
type nodeClock struct {
	mu     sync.Mutex
	offset time.Duration // offset at since
	rate   float64
	since  time.Time
}

func newNodeClock() *nodeClock { return &nodeClock{rate: 1, since: time.Now()} }

// offsetAtLocked is the clock's offset from real time at real time t.
func (c *nodeClock) offsetAtLocked(t time.Time) time.Duration {
	if c.rate == 1 {
		return c.offset
	}
	return c.offset + time.Duration((c.rate-1)*float64(t.Sub(c.since)))
}

// offsetAt returns how far the node clock is ahead of real time at real
// time t.
func (c *nodeClock) offsetAt(t time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offsetAtLocked(t)
}

// at returns the node's time at real time t.
func (c *nodeClock) at(t time.Time) time.Time { return t.Add(c.offsetAt(t)) }

// state returns the clock's offset at since and its rate: the clock reads
// real time + offset + (rate − 1) × (real time − since).
func (c *nodeClock) state() (offset time.Duration, rate float64, since time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset, c.rate, c.since
}

// jump moves the clock by d (back if d < 0).
func (c *nodeClock) jump(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// setRate makes the clock run at r × real time from now on, keeping the
// offset accumulated so far.
func (c *nodeClock) setRate(r float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	c.offset = c.offsetAtLocked(now)
	c.since = now
	c.rate = r
}

func (c *nodeClock) getRate() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rate
}

// backend is one node's server: miniredis or a redis-server process. Its
// methods are called with the Node's mutex held, except addr.
type backend interface {
	// addr is the server's own address (not the proxy's); fixed.
	addr() string
	// kill makes the server go away at once, even while paused; commands not
	// yet executed are never executed.
	kill() error
	// start brings a killed server back, keeping its data if keepsData.
	start(ctx context.Context) error
	// keepsData reports whether start keeps the data of a killed server.
	keepsData() bool
	// wipe deletes the data of a killed server.
	wipe() error
	// pause makes the server stop executing commands until resume.
	pause() error
	resume() error
	// syncClock brings the server in line with the node clock: it moves the
	// server's own clock, whatever the server's state, or, when the clock
	// is emulated, the keys' expiry on a running server that is not paused.
	syncClock(ctx context.Context) error
	// forgetClock records that the data is gone, so clock debts are void.
	forgetClock()
	// emulatesClock reports whether the clock is emulated on the keys
	// (syncClock does work) rather than driven inside the server.
	emulatesClock() bool
	// stepsBack reports whether the server's clock can step back.
	stepsBack() bool
	// close stops the server for good and releases its resources.
	close() error
}

// Node is one Redis node of a Cluster, reached through its own Proxy. Its
// fault methods are safe for concurrent use; each returns once the fault is
// in place (Pause returns at once and ends by itself).
type Node struct {
	index int
	name  string
	kind  Backend
	proxy *Proxy
	be    backend
	clock *nodeClock
	admin *redis.Client // straight to the server, bypassing the proxy

	mu         sync.Mutex
	closed     bool
	killed     bool
	paused     bool
	pauseUntil time.Time
	pauseGen   uint64
	pauseStop  chan struct{} // closed when the current pause ends early
	tickStop   chan struct{} // non-nil while the rate ticker runs
	bgErr      error         // first error of a background goroutine
	policy     string        // maxmemory_policy set since the last start; "": the default

	wg sync.WaitGroup // pause and rate goroutines
}

// newAdminClient returns the harness's own client to a server: no command
// retries (a re-sent clock script would apply twice), one dial attempt,
// context deadlines honoured.
func newAdminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1,
		DialerRetries:            1,
		DialTimeout:              500 * time.Millisecond,
		ReadTimeout:              adminTimeout,
		WriteTimeout:             adminTimeout,
		ContextTimeoutEnabled:    true,
		PoolSize:                 2,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Index returns the node's position in the cluster, from 0.
func (n *Node) Index() int { return n.index }

// Name returns the node's name, "node0", "node1", ...
func (n *Node) Name() string { return n.name }

// Addr returns the address clients dial, "127.0.0.1:PORT": the node's proxy.
// It is fixed for the cluster's life, across Kill and Restart.
func (n *Node) Addr() string { return n.proxy.Addr() }

// Backend returns the kind of server behind the node.
func (n *Node) Backend() Backend { return n.kind }

// Proxy returns the TCP proxy in front of the node, for faults the Node
// methods do not cover (Hold, CloseConns, Stats). Do not Close it or call Up
// or Down on it; use Kill and Restart.
func (n *Node) Proxy() *Proxy { return n.proxy }

// Kill makes the server go away: new connections to Addr are refused
// (ECONNREFUSED) and open ones are closed; commands not yet executed, such as
// those queued during a Pause, are never executed. In-process, the miniredis
// is closed but its data stays in memory, as if persisted; on redis-server the
// process gets SIGKILL. Kill ends a Pause. Killing a killed node does
// nothing. It returns ErrClosed after Cluster.Close, or the error from
// stopping the server.
func (n *Node) Kill() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	return n.killLocked()
}

func (n *Node) killLocked() error {
	if n.killed {
		return nil
	}
	if n.paused {
		// Killed while stopped: the queued commands die with it.
		n.cancelPauseLocked()
	}
	n.killed = true
	return errors.Join(n.proxy.Down(), n.be.kill())
}

// Restart brings the node back with its data, killing it first if it is
// running (a restart, not a crash: in-process data stays in memory; on
// redis-server the AOF is replayed). Keys whose TTL ran out meanwhile, on the
// node's clock, are gone. It waits for the server to answer, bounded by ctx.
// It returns ErrNeedsPersistence on the redis-server backend without
// ClusterOptions.Persistence, ErrClosed after Cluster.Close, or the error
// from stopping or starting the server.
func (n *Node) Restart(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if !n.be.keepsData() {
		return fmt.Errorf("%w (%s)", ErrNeedsPersistence, n.name)
	}
	if err := n.killLocked(); err != nil {
		return err
	}
	return n.startLocked(ctx)
}

// RestartAmnesia brings the node back with all its data lost, as after a
// crash without persistence, killing it first if it is running. In-process
// the miniredis is closed, flushed and restarted on the same address; on
// redis-server the process gets SIGKILL, its data directory is wiped and a
// new process starts on the same port. It waits for the server to answer,
// bounded by ctx. It returns ErrClosed after Cluster.Close, or the error from
// stopping, wiping or starting the server.
func (n *Node) RestartAmnesia(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if err := n.killLocked(); err != nil {
		return err
	}
	if err := n.be.wipe(); err != nil {
		return err
	}
	n.be.forgetClock()
	return n.startLocked(ctx)
}

// startLocked starts a killed node and reopens its proxy.
func (n *Node) startLocked(ctx context.Context) error {
	if err := n.be.start(ctx); err != nil {
		return fmt.Errorf("chaos: restart %s: %w", n.name, err)
	}
	if !n.be.keepsData() {
		n.be.forgetClock()
	}
	n.killed = false
	n.policy = ""
	if err := n.proxy.Up(); err != nil {
		return err
	}
	return n.syncClockLocked()
}

// Pause makes the server stop answering for d (> 0), then resume and run the
// commands queued meanwhile, as a stopped process would. Keys keep expiring
// on the node's clock during the pause. In-process, every command waits in
// a server hook (the miniredis mutex is not held, so the harness can still
// end the pause); on redis-server the process gets SIGSTOP, then SIGCONT.
// Pause returns at once. Pausing a paused node extends the pause to end d
// from now if that is later. Kill, HealAll and Cluster.Close end a pause
// early. It returns ErrInvalidFault for d <= 0, ErrNodeDown on a killed node,
// ErrClosed after Cluster.Close, or the error from signalling the server.
func (n *Node) Pause(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("%w: pause of %v", ErrInvalidFault, d)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.killed {
		return fmt.Errorf("%w: cannot pause %s", ErrNodeDown, n.name)
	}
	until := time.Now().Add(d)
	if n.paused {
		if until.After(n.pauseUntil) {
			n.pauseUntil = until
		}
		return nil
	}
	if err := n.be.pause(); err != nil {
		return fmt.Errorf("chaos: pause %s: %w", n.name, err)
	}
	n.paused = true
	n.pauseUntil = until
	n.pauseGen++
	stop := make(chan struct{})
	n.pauseStop = stop
	n.wg.Add(1)
	go n.pauseLoop(n.pauseGen, stop)
	return nil
}

// pauseLoop ends pause gen when its time is up, unless it ended otherwise.
func (n *Node) pauseLoop(gen uint64, stop <-chan struct{}) {
	defer n.wg.Done()
	for {
		n.mu.Lock()
		if !n.paused || n.pauseGen != gen {
			n.mu.Unlock()
			return
		}
		wait := time.Until(n.pauseUntil)
		if wait <= 0 {
			n.setBgErrLocked(n.resumeLocked())
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-stop:
			t.Stop()
		}
	}
}

// cancelPauseLocked forgets the current pause without resuming the server.
func (n *Node) cancelPauseLocked() {
	n.paused = false
	n.pauseGen++
	close(n.pauseStop)
	n.pauseStop = nil
}

// resumeLocked ends the current pause now.
func (n *Node) resumeLocked() error {
	if !n.paused {
		return nil
	}
	n.cancelPauseLocked()
	if err := n.be.resume(); err != nil {
		return fmt.Errorf("chaos: resume %s: %w", n.name, err)
	}
	return n.syncClockLocked()
}

// DelayRequests delays every request to the node by d on open and new
// connections (d <= 0 turns it off); see Proxy.DelayRequests.
func (n *Node) DelayRequests(d time.Duration) { n.proxy.DelayRequests(d) }

// DelayReplies delays every reply from the node by d on open and new
// connections (d <= 0 turns it off); see Proxy.DelayReplies.
func (n *Node) DelayReplies(d time.Duration) { n.proxy.DelayReplies(d) }

// DropRequests, while on, loses every request to the node: the node never
// sees it and the caller times out. Connections stay open.
func (n *Node) DropRequests(on bool) { n.proxy.DropRequests(on) }

// DropReplies, while on, loses every reply from the node: the node executes
// the command but the caller times out. Connections stay open.
func (n *Node) DropReplies(on bool) { n.proxy.DropReplies(on) }

// Partition, while on, drops both directions (DropRequests and DropReplies):
// the node is cut off but connections to the proxy still open, as when
// packets are lost rather than refused.
func (n *Node) Partition(on bool) {
	n.proxy.DropRequests(on)
	n.proxy.DropReplies(on)
}

// HealNetwork clears every network fault of the node: delays, drops,
// partition and a proxy Hold. It does not restart a killed node.
func (n *Node) HealNetwork() { n.proxy.Heal() }

// JumpClock steps the node's clock by d, forward (d > 0) or back (d < 0),
// taking effect for the next command: forward, keys expire d earlier than
// they would have; back, d later, and TIME goes back.
//
// In-process the miniredis clock itself jumps (TIME moves too), forward
// only. On redis-server with real clocks (ClockReal, see Cluster.Clocks)
// the server's own wall clock jumps, either way, also while it is killed or
// paused. With emulated clocks the effect of a forward jump on the keys is
// emulated instead, atomically in one Lua script: every key with a TTL has
// it shortened by d, or is deleted when its TTL is at most d; TIME and keys
// written later are unaffected, and the TTLs are in whole milliseconds (the
// sub-millisecond rest is carried to the next jump or rate tick); on a
// killed or paused node the jump is applied when it comes back.
//
// A backward jump where the clock cannot go back (in-process, emulated)
// returns ErrUnsupported. It also returns ErrClosed after Cluster.Close, or
// the error of moving the clock.
func (n *Node) JumpClock(d time.Duration) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if d < 0 && !n.be.stepsBack() {
		return fmt.Errorf("%w: clock step back of %v on %s (%s)", ErrUnsupported, -d, n.name, n.kind)
	}
	n.clock.jump(d)
	return n.syncClockLocked()
}

// SetClockRate makes the node's clock run at r × real time from now on
// (r > 0; 1 is normal), keeping the offset accumulated so far: with r = 2 a
// key's TTL runs out in half the real time.
//
// In-process the miniredis clock itself runs at that rate; on redis-server
// with real clocks, the server's own wall clock does. With emulated clocks
// it is emulated on the keys, like JumpClock: every 5 ms a goroutine
// shortens every TTL by (r − 1) × the real time elapsed, deleting keys whose
// TTL runs out; this is not a clock change, and rates below 1 cannot be
// emulated (ErrUnsupported). It returns ErrInvalidFault for a rate that is
// not a positive finite number, ErrClosed after Cluster.Close, or the error
// of moving the clock.
func (n *Node) SetClockRate(r float64) error {
	if !(r > 0) || math.IsInf(r, 0) {
		return fmt.Errorf("%w: clock rate %v", ErrInvalidFault, r)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.be.emulatesClock() && r < 1 {
		return fmt.Errorf("%w: clock rate %v < 1 on %s (redis-server keys can be shortened, not lengthened)", ErrUnsupported, r, n.kind)
	}
	// Settle the old rate's debt before switching; then give a real clock
	// its new rate.
	err := n.syncClockLocked()
	n.clock.setRate(r)
	n.setTickerLocked(r != 1)
	return errors.Join(err, n.syncClockLocked())
}

// ClockRate returns the node's clock rate (1 = real time).
func (n *Node) ClockRate() float64 { return n.clock.getRate() }

// Clock returns the node's current time: real time plus the offset from
// JumpClock and SetClockRate. In-process it is the time the node's miniredis
// uses; on redis-server with real clocks it is the server's own clock, with
// emulated ones the clock the keys' TTLs follow (the server's is the
// machine's).
func (n *Node) Clock() time.Time { return n.clock.at(time.Now()) }

// setTickerLocked starts or stops the goroutine applying the clock rate on a
// backend that emulates its clock.
func (n *Node) setTickerLocked(on bool) {
	if !n.be.emulatesClock() {
		return
	}
	switch {
	case on && n.tickStop == nil:
		n.tickStop = make(chan struct{})
		n.wg.Add(1)
		go n.tickLoop(n.tickStop)
	case !on && n.tickStop != nil:
		close(n.tickStop)
		n.tickStop = nil
	}
}

func (n *Node) tickLoop(stop <-chan struct{}) {
	defer n.wg.Done()
	t := time.NewTicker(rateTick)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		n.mu.Lock()
		select {
		case <-stop:
		default:
			n.setBgErrLocked(n.syncClockLocked())
		}
		n.mu.Unlock()
	}
}

// syncClockLocked applies the clock to the node: to its server's own
// clock in any state, or, emulated, to the keys of a live, unpaused node.
func (n *Node) syncClockLocked() error {
	if n.closed || (n.be.emulatesClock() && (n.killed || n.paused)) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), adminTimeout)
	defer cancel()
	if err := n.be.syncClock(ctx); err != nil {
		return fmt.Errorf("chaos: clock of %s: %w", n.name, err)
	}
	return nil
}

func (n *Node) setBgErrLocked(err error) {
	if err != nil && n.bgErr == nil {
		n.bgErr = err
	}
}

// heal brings the node back to normal: running, unpaused, no network fault,
// clock rate 1, a clock behind real time moved forward to it (an offset
// ahead is kept: clocks never go back). It returns, and clears, the first
// error of a background goroutine too.
func (n *Node) heal(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	errs := []error{n.bgErr}
	n.bgErr = nil
	n.proxy.Heal()
	errs = append(errs, n.resumeLocked())
	// Settle the old rate's debt before switching back to 1.
	errs = append(errs, n.syncClockLocked())
	n.clock.setRate(1)
	n.setTickerLocked(false)
	if off := n.clock.offsetAt(time.Now()); off < 0 {
		n.clock.jump(-off)
	}
	errs = append(errs, n.syncClockLocked())
	if n.killed {
		errs = append(errs, n.startLocked(ctx))
	}
	errs = append(errs, n.healDataLocked(ctx))
	return errors.Join(errs...)
}

// state returns whether the node is killed and whether it is paused.
func (n *Node) state() (killed, paused bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false, false, ErrClosed
	}
	return n.killed, n.paused, nil
}

// keys lists the keys matching pattern, asking the server directly; ok is
// false for a killed node.
func (n *Node) keys(ctx context.Context, pattern string) (keys []string, ok bool, err error) {
	killed, paused, err := n.state()
	if err != nil || killed {
		return nil, false, err
	}
	if paused {
		return nil, false, fmt.Errorf("%w: %s", ErrNodePaused, n.name)
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	it := n.admin.Scan(ctx, 0, pattern, 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		return nil, false, fmt.Errorf("chaos: keys of %s: %w", n.name, err)
	}
	sort.Strings(keys)
	return keys, true, nil
}

// flush deletes every key on the node, whatever its state except paused.
func (n *Node) flush(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if n.paused {
		return fmt.Errorf("%w: %s", ErrNodePaused, n.name)
	}
	defer n.be.forgetClock()
	if n.killed {
		return n.be.wipe()
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if err := n.admin.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("chaos: flush %s: %w", n.name, err)
	}
	return nil
}

// shutdown ends the node's pause and rate ticker and marks it closed; the
// caller then waits for n.wg and closes the proxy, admin client and server.
func (n *Node) shutdown() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	err := n.resumeLocked()
	n.setTickerLocked(false)
	n.closed = true
	return err
}
