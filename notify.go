package redlock

// Waking waiters on release: an Acquire that waits for a held key is told,
// over pub/sub, when the key is released and its turn has come, instead of
// sleeping through its retry delay. The wake-up is a hint only: a lost, late
// or forged message costs at most an attempt or a retry delay, never the
// lock's guarantees, which come from the attempt alone.

import (
	"context"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// waitChannelPrefix starts the name of every waiter's channel.
const waitChannelPrefix = "redlock:wait:"

// ticketLen is the length of a waiter's ticket: 16 hex digits of the Unix
// time in microseconds when it started waiting, then 8 of a sequence number
// of this process. Tickets sort in the order waiters came (within one
// process always; across processes by their clocks), except that a
// read/write lock's readers come after every writer (readerTicketMark).
const ticketLen = 24

// readerTicketMark is the first character of the ticket of a read/write
// lock's reader (RLock), in place of the time's first hex digit, which
// stays 0 for another 36,000 years. It sorts after every hex digit in byte
// order and in the usual locales' collation, which Redis's Lua compares
// strings with (digits, then a to f, before r), so the lowest ticket of a key
// on a node is a writer's (Lock, or Client.Acquire on the name) whenever a
// writer waits there, and readers still sort among themselves in the order
// they came. That is how a release that frees the name for a writer wakes
// the longest-waiting writer rather than a reader that came before it,
// which the writer's intent would refuse anyway (luaWakeNext), and how a
// read/write lock's release tells whether the waiter it chose is a reader.
// '?' matches it in the release scripts' PUBSUB CHANNELS pattern as it
// matches a digit.
const readerTicketMark = 'r'

var ticketSeq atomic.Uint32

// waitChannel names the channel of a waiter with ticket for lock key name
// (the prefix of WithPrefix included): "redlock:wait:<ticket>:<tagged>",
// where tagged is channelKey(name). The waiter subscribes to it on every
// node while it waits. releaseScript and releaseVouchScript, where they
// delete the key, list the key's waiters' channels on that node (PUBSUB
// CHANNELS), and publish to the one with the lowest ticket only (a
// read/write lock's release, when that one is a reader, to every reader:
// luaWakeNext): the message is the SHA1 of the released owner value in
// hex, the same on every node, so the waiter can tell one release from
// another.
func waitChannel(ticket, name string) string {
	return waitChannelPrefix + ticket + ":" + channelKey(name)
}

// waitingChannelPrefix starts the name of a key's presence channel.
const waitingChannelPrefix = "redlock:waiting:"

// waitingChannel names the presence channel of lock key name:
// "redlock:waiting:<tagged>" (channelKey). A Client with waiters of the
// key subscribes to it on every node, next to its waiters' own channels,
// and nothing is ever published to it: the release scripts ask PUBSUB
// NUMSUB for it (one lookup, whatever else is subscribed on the node) and
// list the waiters' channels (PUBSUB CHANNELS, which walks every channel
// of the node) only when some Client waits for this key.
func waitingChannel(name string) string {
	return waitingChannelPrefix + channelKey(name)
}

// channelKey is lock key name as the wake-up channels carry it: with a
// Redis Cluster hash tag that puts the channels in the key's slot, name
// itself when it has one ("user:{7}"), else "{name}" (keys.go). On a Redis
// Cluster used as one node, PUBSUB NUMSUB and PUBSUB CHANNELS in the
// release scripts see the subscriptions of the master that runs the script
// only, the master of the key's slot: a waiter subscribes there (nodeSub).
// luaWakeNext builds the same name.
func channelKey(name string) string {
	if hasHashTag(name) {
		return name
	}
	return "{" + name + "}"
}

// newTicket returns a waiter's ticket: a reader's (a read/write lock's
// RLock) starts with readerTicketMark.
func newTicket(reader bool) string {
	t := fmt.Sprintf("%016x%08x", uint64(time.Now().UnixMicro()), ticketSeq.Add(1))
	if reader {
		t = string(readerTicketMark) + t[1:]
	}
	return t
}

// handoffWindow is how long after one of its Release calls woke a waiter of
// a key a Client's next Acquire of that key waits its turn behind the
// waiters instead of trying at once (notifier.yielding).
const handoffWindow = 50 * time.Millisecond

// subscriber is the part of a go-redis client that opens a pub/sub
// connection (redis.Client, ClusterClient, Ring, sentinel clients).
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// slotRouter is the part of a go-redis Redis Cluster client
// (ClusterClient) that names the master serving a key's slot. One
// ClusterClient PubSub is one connection to one master, and the release
// scripts see the subscriptions of the key's master only: a node whose
// client is a slotRouter gets a pub/sub connection per master its waiters'
// keys live on (nodeSub).
type slotRouter interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE write, dial included.
// The waiters never wait for it: they sleep their retry delay meanwhile.
const subscribeTimeout = 5 * time.Second

// notifier wakes the Acquire calls of one Client that wait for a held key
// when the key is released and their turn has come.
//
// Each node gets at most one pub/sub connection (a Redis Cluster used as
// one node: one per master, see nodeSub), opened the first time an Acquire
// of the Client waits and closed by Client.Close; nothing of it exists for
// a Client that never waited. A waiting Acquire takes a ticket
// at its first retry delay and subscribes to its own channel (waitChannel)
// on every node, through that node's goroutine, never on its own path. A
// release, on each node where it deletes the key, publishes to the channel
// with the lowest ticket: one waiter in all is told, the one that has waited
// longest, so a release sends N messages, not N per waiting Client, and the
// waiters take the key in the order they came, except that a read/write
// lock's readers come after its writers (readerTicketMark); and when no
// writer waits, a read/write lock's release tells every waiting reader,
// since they can all hold at once.
//
// A waiter is woken when a majority (N/2+1) of nodes announced the same
// release to it since its last attempt began: the condition under which its
// next attempt can succeed. One node's message is not enough, nor are
// messages of different releases (a split vote's losers free a minority of
// nodes). A waiter unsubscribes when its Acquire returns, so that the next
// release finds the next waiter; a woken waiter whose attempt failed keeps
// its place. The UNSUBSCRIBE goes out in the background: a release of this
// Client that comes first may still tell the waiter that left, so it does
// not count as a hand-off (leftWaiter).
//
// When a node cannot subscribe (a client without pub/sub, a connection that
// fails, an ACL that forbids SUBSCRIBE), its messages never come: every
// wait is bounded by the retry policy's delay in any case, and a key that
// expires without a release is found by that delay too.
type notifier struct {
	c *Client
	// handoffs counts the entries of handedOff, so that Acquire skips the
	// lock when nobody waited (the uncontended path); lefts those of left,
	// so that Release does (leftChannels).
	handoffs atomic.Int32
	lefts    atomic.Int32

	mu        sync.Mutex
	closed    bool
	started   bool
	waiters   map[string]*lockWaiter // by channel: the waiters that want to be told
	handedOff map[string]time.Time   // lock key name → when a Release of this Client woke a waiter
	left      map[string]*leftWaiter // by channel: waiters of this Client that left, maybe still subscribed
	subs      []*nodeSub             // by node index; nil for a node without pub/sub
	done      chan struct{}          // closed by close
	wg        sync.WaitGroup         // the node goroutines
	// ctx ends with close: the pub/sub connections' commands (a dial in
	// flight included) give up at once, so close does not wait for them.
	ctx    context.Context
	cancel context.CancelFunc
}

// nodeSub is one node's pub/sub, used by that node's goroutine (run): one
// connection for a plain node, opened when the Client first waits; for a
// Redis Cluster used as one node (route), one per master that serves the
// slot of a key waited for, opened by its first SUBSCRIBE, which the
// ClusterClient routes by the slot of the channels' hash tag (channelKey).
type nodeSub struct {
	idx   int
	sub   subscriber
	route slotRouter      // nil: a plain node
	kick  chan struct{}   // buffered: the set of waiters changed
	have  map[string]bool // channels subscribed or being subscribed; notifier.mu
	// conns are the connections by master address ("" for a plain node's
	// one); notifier.mu. on is the connection each channel of have was
	// sent to; only run uses it.
	conns map[string]*redis.PubSub
	on    map[string]*redis.PubSub
}

// leftWaiter is a waiter of this Client that left (its Acquire returned)
// while it was subscribed on some node: until those nodes have confirmed
// its UNSUBSCRIBE, a release there may still tell it, the longest waiter,
// of the release, a hand-off to nobody (notifier.released).
type leftWaiter struct {
	name  string    // its lock key name
	nodes int       // nodes whose UNSUBSCRIBE is not confirmed yet
	at    time.Time // when it left; once nodes is 0, when the last one confirmed
}

// lockWaiter is one waiting Acquire. A nil *lockWaiter waits its retry delay
// only.
type lockWaiter struct {
	n        *notifier
	name     string // the lock key name
	ch       string
	presence string // the key's presence channel (waitingChannel)
	// The fields below are guarded by n.mu.
	listed     bool   // in n.waiters: wants to be told
	subscribed []bool // by node: SUBSCRIBE confirmed since it was listed
	woken      bool   // a majority announced a release to it since its attempt began
	recent     [4]seenRelease
	next       int           // the slot of recent to reuse
	wake       chan struct{} // buffered: woken
	// yielder: the waiter of an Acquire that yields to a waiter a
	// Release of this Client woke (yielding); giveUp wakes it.
	yielder bool
	// rw: a read/write lock's waiter (RLock, Lock). Its wait runs on to
	// the queued delay only when heard: it was subscribed on a majority
	// of nodes when its last attempt began (sleep).
	rw, heard bool
}

// seenRelease counts the nodes that announced one release.
type seenRelease struct {
	id    string
	nodes uint64 // bit i: node i announced it (nodes beyond 64 are counted in extra)
	extra int
}

// count records that node i announced release id, and reports whether that
// made a majority of quorum nodes. Only the last few releases are
// remembered: announcements of one release arrive within a few
// milliseconds of each other.
func (w *lockWaiter) count(i int, id string, quorum int) bool {
	var r *seenRelease
	for j := range w.recent {
		if w.recent[j].id == id {
			r = &w.recent[j]
			break
		}
	}
	if r == nil {
		r = &w.recent[w.next]
		w.next = (w.next + 1) % len(w.recent)
		*r = seenRelease{id: id}
	}
	before := bits.OnesCount64(r.nodes) + r.extra
	if i < 64 {
		r.nodes |= 1 << i
	} else {
		r.extra++
	}
	after := bits.OnesCount64(r.nodes) + r.extra
	return before < quorum && after >= quorum
}

// join makes a waiter for lock key name (prefix included) with a new
// ticket and subscribes to its channel on every node, in the background. It
// returns nil (wait the retry delay only) once the Client is closed or when
// no node supports pub/sub. It waits as a mutex's waiter (waitLock).
func (n *notifier) join(name string) *lockWaiter { return n.joinAs(name, waitLock) }

// waitKind is what a waiter waits as.
type waitKind uint8

const (
	// waitLock: Client.Acquire, AcquireMulti, a semaphore's permit: a
	// writer's ticket.
	waitLock waitKind = iota
	// waitWriter: a read/write lock's Lock: a writer's ticket; it waits on
	// to the queued delay only once heard (lockWaiter.rw).
	waitWriter
	// waitReader: a read/write lock's RLock: a reader's ticket, after every
	// writer's (readerTicketMark); heard as waitWriter.
	waitReader
)

// joinAs is join for a waiter of kind k.
func (n *notifier) joinAs(name string, k waitKind) *lockWaiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	if !n.started {
		n.start()
	}
	if len(n.subs) == 0 {
		return nil
	}
	w := &lockWaiter{n: n, name: name, ch: waitChannel(newTicket(k == waitReader), name), presence: waitingChannel(name), subscribed: make([]bool, len(n.subs)), wake: make(chan struct{}, 1), rw: k != waitLock}
	n.list(w)
	return w
}

// list adds w to the waiters to subscribe for. n.mu is held.
func (n *notifier) list(w *lockWaiter) {
	w.listed = true
	n.waiters[w.ch] = w
	n.kickAll()
}

// unlist removes w from the waiters to subscribe for, and records it as
// left where some node has its channel. n.mu is held.
func (n *notifier) unlist(w *lockWaiter) {
	if !w.listed {
		return
	}
	w.listed = false
	clear(w.subscribed)
	delete(n.waiters, w.ch)
	k := 0
	for _, ns := range n.subs {
		if ns != nil && ns.have[w.ch] {
			k++
		}
	}
	if k > 0 {
		if n.left == nil {
			n.left = make(map[string]*leftWaiter)
		}
		now := time.Now()
		if len(n.left) >= 64 {
			for ch, l := range n.left {
				if l.over(now) {
					delete(n.left, ch)
				}
			}
		}
		n.left[w.ch] = &leftWaiter{name: w.name, nodes: k, at: now}
		n.lefts.Store(int32(len(n.left)))
	}
	n.kickAll()
}

// over reports whether the waiter that left can no longer be told of a
// release: every node confirmed its UNSUBSCRIBE handoffWindow ago or more
// (a release's reply may be read after the confirmation of an UNSUBSCRIBE
// that the node ran after the release), or subscribeTimeout passed since
// it left (an UNSUBSCRIBE that was never confirmed failed, and a
// connection that fails loses its subscriptions).
func (l *leftWaiter) over(now time.Time) bool {
	if l.nodes > 0 {
		return now.Sub(l.at) >= subscribeTimeout
	}
	return now.Sub(l.at) >= handoffWindow
}

// start opens a pub/sub connection to every plain node whose client has
// one (a cluster node's open as its waiters need them), and starts each
// node's goroutine. n.mu is held.
func (n *notifier) start() {
	n.started = true
	n.waiters = make(map[string]*lockWaiter)
	n.done = make(chan struct{})
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.subs = make([]*nodeSub, len(n.c.nodes))
	some := false
	for i, nd := range n.c.nodes {
		s, ok := nd.Client.(subscriber)
		if !ok || isNil(s) {
			continue
		}
		ns := &nodeSub{idx: i, sub: s, kick: make(chan struct{}, 1), have: make(map[string]bool),
			conns: make(map[string]*redis.PubSub), on: make(map[string]*redis.PubSub)}
		ns.route, _ = s.(slotRouter)
		n.subs[i] = ns
		some = true
		n.wg.Add(1)
		go n.run(ns)
		if ns.route == nil {
			ps := s.Subscribe(n.ctx)
			ns.conns[""] = ps
			n.wg.Add(1)
			go n.receive(ns.idx, ps)
		}
	}
	if !some {
		n.subs = nil
	}
}

// kickAll tells every node goroutine that the set of waiters changed. n.mu
// is held.
func (n *notifier) kickAll() {
	for _, ns := range n.subs {
		if ns != nil {
			select {
			case ns.kick <- struct{}{}:
			default:
			}
		}
	}
}

// run is a node's goroutine that brings the node's subscriptions in line
// with the waiters listed.
func (n *notifier) run(ns *nodeSub) {
	defer n.wg.Done()
	for {
		select {
		case <-ns.kick:
			n.reconcile(ns)
		case <-n.done:
			return
		}
	}
}

// receiveBackoff is how long receive waits after a failed read before it
// reads again (go-redis then reconnects and subscribes again); the pause
// doubles with each failure in a row up to receiveBackoffMax, so that a
// node that is down is not dialed ten times a second by every Client that
// once waited, whether anybody waits or not. A waiter loses nothing it
// needs meanwhile: its retry policy's delay bounds every wait.
const (
	receiveBackoff    = 100 * time.Millisecond
	receiveBackoffMax = 5 * time.Second
)

// receive is the goroutine that reads one pub/sub connection of node i:
// release messages and subscription confirmations. It reads directly
// (PubSub.Receive) rather than through go-redis's Channel, which would add
// a goroutine hop to every wake-up. It ends once close closed the PubSub.
func (n *notifier) receive(i int, ps *redis.PubSub) {
	defer n.wg.Done()
	backoff := receiveBackoff
	for {
		m, err := ps.Receive(n.ctx)
		if err != nil {
			t := time.NewTimer(backoff)
			select {
			case <-n.done:
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, receiveBackoffMax)
			continue
		}
		backoff = receiveBackoff
		switch m := m.(type) {
		case *redis.Message:
			n.deliver(i, m.Channel, m.Payload)
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe":
				n.confirmed(i, m.Channel)
			case "unsubscribe":
				n.unsubscribed(m.Channel)
			}
		}
	}
}

// reconcile subscribes the node to the listed waiters' channels and their
// keys' presence channels it lacks, and unsubscribes it from the others. A
// waiter's channel and its key's presence channel are sent in one
// SUBSCRIBE, so no release sees the one without the other.
func (n *notifier) reconcile(ns *nodeSub) {
	var add, drop []string
	n.mu.Lock()
	want := make(map[string]bool, 2*len(n.waiters))
	for ch, w := range n.waiters {
		want[ch], want[w.presence] = true, true
	}
	for ch := range want {
		if !ns.have[ch] {
			add = append(add, ch)
			ns.have[ch] = true
		}
	}
	for ch := range ns.have {
		if !want[ch] {
			drop = append(drop, ch)
			delete(ns.have, ch)
		}
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(n.ctx, subscribeTimeout)
	defer cancel()
	// Unsubscribe first: a woken waiter's channel must be gone before the
	// next release looks for the lowest ticket. go-redis records the
	// channels even when the write fails, and subscribes to them again
	// when it reconnects.
	for ps, chs := range n.byConn(ns, drop) {
		_ = ps.Unsubscribe(ctx, chs...)
	}
	if len(add) == 0 {
		return
	}
	if ns.route == nil {
		ps := ns.conns[""]
		for _, ch := range add {
			ns.on[ch] = ps
		}
		_ = ps.Subscribe(ctx, add...)
		return
	}
	n.subscribeRouted(ctx, ns, add)
}

// byConn takes the channels out of ns.on and groups them by the connection
// they were sent to.
func (n *notifier) byConn(ns *nodeSub, chs []string) map[*redis.PubSub][]string {
	out := make(map[*redis.PubSub][]string)
	for _, ch := range chs {
		if ps := ns.on[ch]; ps != nil {
			out[ps] = append(out[ps], ch)
		}
		delete(ns.on, ch)
	}
	return out
}

// subscribeRouted subscribes a cluster node to the channels, each on the
// connection to the master of its slot, opening that connection if
// needed. A waiter's channel and its key's presence channel share a slot,
// so they go in one SUBSCRIBE. A channel whose master is unknown now (the
// cluster is unreachable) is left out of have, and tried again when the
// waiters next change; meanwhile its waiter waits its retry delay.
func (n *notifier) subscribeRouted(ctx context.Context, ns *nodeSub, chs []string) {
	byAddr := make(map[string][]string)
	var failed []string
	for _, ch := range chs {
		m, err := ns.route.MasterForKey(ctx, ch)
		if err != nil {
			failed = append(failed, ch)
			continue
		}
		addr := m.Options().Addr
		byAddr[addr] = append(byAddr[addr], ch)
	}
	for addr, chs := range byAddr {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return
		}
		ps, opened := ns.conns[addr], false
		if ps == nil {
			// No connection yet: the Subscribe below opens it, to the
			// master of chs[0]'s slot, and only then does receive read it
			// (a read first would connect to any node).
			ps, opened = ns.sub.Subscribe(n.ctx), true
			ns.conns[addr] = ps
			n.wg.Add(1) // run's own count is held: close is not waiting at zero
		}
		n.mu.Unlock()
		for _, ch := range chs {
			ns.on[ch] = ps
		}
		_ = ps.Subscribe(ctx, chs...)
		if opened {
			go n.receive(ns.idx, ps)
		}
	}
	if len(failed) > 0 {
		n.mu.Lock()
		for _, ch := range failed {
			delete(ns.have, ch)
		}
		n.mu.Unlock()
	}
}

// unsubscribed records that a node confirmed the UNSUBSCRIBE of a waiter
// of this Client that left (see leftWaiter).
func (n *notifier) unsubscribed(ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l := n.left[ch]; l != nil && l.nodes > 0 {
		l.nodes--
		if l.nodes == 0 {
			l.at = time.Now()
		}
	}
}

// mayTellLeft reports whether a release of lock key name may have told a
// waiter of this Client that has left (see leftWaiter), other than those
// whose channels the release named to be skipped (leftChannels), and
// forgets those that no release can tell any more. n.mu is held.
func (n *notifier) mayTellLeft(name string, skipped []any) bool {
	now, may := time.Now(), false
	for ch, l := range n.left {
		switch {
		case l.over(now):
			delete(n.left, ch)
		case l.name == name && !slices.Contains(skipped, any(ch)):
			may = true
		}
	}
	n.lefts.Store(int32(len(n.left)))
	return may
}

// leftChannels returns the channels of this Client's waiters of lock key
// name that have left and may still be subscribed (leftWaiter), for a
// Release of the key to pass to the release script, which then tells the
// next waiter instead (luaWakeNext): a waiter that just took the key, held
// it briefly and released it is usually still subscribed somewhere, and
// still the longest waiter there. Without the skip, its own release told
// it, a hand-off to nobody, and its next Acquire could not tell that
// apart from a real one; it no longer yielded, and raced the waiter its
// release should have woken. nil (almost always): none.
func (n *notifier) leftChannels(name string) []any {
	if n.lefts.Load() == 0 {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	now := time.Now()
	var chs []any
	for ch, l := range n.left {
		if l.name == name && !l.over(now) {
			chs = append(chs, ch)
		}
	}
	return chs
}

// confirmed records that node i confirmed a waiter's subscription (its
// reply to SUBSCRIBE): from then on the node tells it of releases.
func (n *notifier) confirmed(i int, ch string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w := n.waiters[ch]; w != nil {
		w.subscribed[i] = true
	}
}

// deliver counts node i's announcement of a release to a waiter and, once
// a majority of nodes announced that release, wakes it. The waiter stays
// subscribed until its Acquire returns (leave): if its attempt fails it is
// still the longest waiter, and the unsubscribe is not sent while the
// attempt is on its way (the lock is then held for a while: the next
// release comes later).
func (n *notifier) deliver(i int, ch, id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := n.waiters[ch]
	if w == nil || !w.count(i, id, n.c.quorum) {
		return // gone, woken already, or no majority yet
	}
	w.woken = true
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// mark records that an attempt begins: only releases from now on wake the
// waiter.
func (w *lockWaiter) mark() {
	if w == nil {
		return
	}
	w.n.mu.Lock()
	w.woken, w.yielder = false, false
	w.heard = w.rw && w.majority()
	w.n.mu.Unlock()
	select {
	case <-w.wake: // a wake-up for the attempt that just began
	default:
	}
}

// sleep waits for the retry delay d, until ctx ends or the Client closes,
// or until the waiter is woken, whichever comes first. A waiter woken during
// its attempt returns at once; one woken earlier whose attempt failed
// subscribes again with its ticket. With queued > d (DefaultRetry), a
// waiter that is subscribed on a majority of nodes when d ends waits on
// until queued: it will be told of the release. A read/write lock's waiter
// waits on only when it was subscribed on a majority already when its
// last attempt began (heard): a release between that attempt's refusal and
// the subscription, which for the first wait is sent after the attempt,
// told it nothing, and the free lock would wait for the queued delay:
// about one wait in 16 of a writer behind readers that hold 5 ms
// (BenchmarkRWLock's writer-wait) did, 125-270 ms. It makes its next
// attempt at d instead, one more attempt per wait. A mutex's waiter has
// the same window; its wait is left as it was.
func (w *lockWaiter) sleep(ctx context.Context, d, queued time.Duration) {
	if d <= 0 {
		return
	}
	var wake <-chan struct{}
	if w != nil {
		n := w.n
		n.mu.Lock()
		now := n.closed || w.woken
		if !now && !w.listed {
			n.list(w) // woken before, and the attempt failed: same ticket
		}
		n.mu.Unlock()
		if now {
			return // released during the attempt, or the Client closed
		}
		wake = w.wake
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-wake:
		return
	case <-t.C:
	}
	if queued <= d || !w.queued() || w.unheard() {
		return
	}
	t.Reset(queued - d)
	select {
	case <-ctx.Done():
	case <-wake:
	case <-t.C:
	}
}

// queued reports whether a majority of nodes confirmed the waiter's
// subscription.
func (w *lockWaiter) queued() bool {
	if w == nil {
		return false
	}
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return !w.n.closed && w.majority()
}

// majority reports whether a majority of nodes confirmed the waiter's
// subscription. n.mu is held.
func (w *lockWaiter) majority() bool {
	k := 0
	for _, s := range w.subscribed {
		if s {
			k++
		}
	}
	return k >= w.n.c.quorum
}

// unheard reports whether the waiter is a read/write lock's that was not
// subscribed on a majority of nodes when its last attempt began (sleep).
func (w *lockWaiter) unheard() bool {
	w.n.mu.Lock()
	defer w.n.mu.Unlock()
	return w.rw && !w.heard
}

// leave removes the waiter: its channel is unsubscribed.
func (w *lockWaiter) leave() {
	if w == nil {
		return
	}
	w.n.mu.Lock()
	w.n.unlist(w)
	w.n.mu.Unlock()
}

// giveUp removes a waiter whose Acquire returns without the lock (its
// context ended, or it gave up): as leave, and a hand-off of the key that
// a Release of this Client recorded meanwhile may have gone to it, so this
// Client's Acquire calls no longer yield to it (yielding), and those
// yielding now try at once. Its channel may still have been the longest
// waiter's when the release ran, before it left: the release was then told
// to nobody, and a yielder would wait for a waiter that never comes.
func (w *lockWaiter) giveUp() {
	if w == nil {
		return
	}
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.unlist(w)
	if _, ok := n.handedOff[w.name]; ok {
		delete(n.handedOff, w.name)
		n.handoffs.Store(int32(len(n.handedOff)))
	}
	for _, y := range n.waiters {
		if y.yielder && y.name == w.name {
			select {
			case y.wake <- struct{}{}:
			default:
			}
		}
	}
}

// released records a release script's reply code from a node call:
// codeHandedOff (the node told a waiter of lock key name) is recorded so
// that this Client's next Acquire of the key waits its turn (yielding). Not
// while a waiter of this Client for the key that has left, and that the
// release did not skip (skipped, from leftChannels), may still be
// subscribed (mayTellLeft): the message may have gone to it, which wants
// the key no more, and the next Acquire would wait for nobody.
func (n *notifier) released(name string, code int64, skipped []any) {
	if code != codeHandedOff {
		return
	}
	now := time.Now()
	n.mu.Lock()
	if n.mayTellLeft(name, skipped) {
		n.mu.Unlock()
		return
	}
	if n.handedOff == nil {
		n.handedOff = make(map[string]time.Time)
	}
	if len(n.handedOff) >= 64 {
		for k, at := range n.handedOff {
			if now.Sub(at) >= handoffWindow {
				delete(n.handedOff, k)
			}
		}
	}
	n.handedOff[name] = now
	n.handoffs.Store(int32(len(n.handedOff)))
	n.mu.Unlock()
}

// yielding reports whether a Release of this Client woke a waiter of lock
// key name less than handoffWindow ago, and forgets it: the woken waiter is
// on its way to the key, and an attempt now would only race it. A waiter of
// this Client that gives up meanwhile ends the wait (giveUp).
func (n *notifier) yielding(name string) bool {
	if n.handoffs.Load() == 0 {
		return false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	at, ok := n.handedOff[name]
	if ok {
		delete(n.handedOff, name)
		n.handoffs.Store(int32(len(n.handedOff)))
	}
	return ok && time.Since(at) < handoffWindow
}

// joinYielding is join for an Acquire that yields to a woken waiter
// (yielding): it takes its ticket behind the waiters, and a waiter of this
// Client that gives up wakes it. nil as join.
func (n *notifier) joinYielding(name string) *lockWaiter {
	w := n.join(name)
	if w != nil {
		n.mu.Lock()
		w.yielder = true
		n.mu.Unlock()
	}
	return w
}

// close wakes every waiter (its Acquire then returns ErrClosed), ends the
// pub/sub connections' commands in flight (ctx), and closes the connections.
// It returns a channel closed once the connections and their goroutines
// have ended: a connection's set-up that its context does not end (a read
// in flight) holds its PubSub until the set-up's own deadline, and Client.Close
// waits for that only within its bound.
func (n *notifier) close() <-chan struct{} {
	ended := make(chan struct{})
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		close(ended)
		return ended
	}
	n.closed = true
	var conns []*redis.PubSub
	for _, ns := range n.subs {
		if ns != nil {
			for _, ps := range ns.conns {
				conns = append(conns, ps)
			}
		}
	}
	for _, w := range n.waiters {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	if n.started {
		close(n.done)
		n.cancel()
	}
	n.mu.Unlock()
	for _, ps := range conns {
		n.wg.Go(func() { _ = ps.Close() })
	}
	go func() {
		n.wg.Wait()
		close(ended)
	}()
	return ended
}
