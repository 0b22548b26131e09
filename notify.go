package redlock

// Waking waiters on release: an Acquire that waits for a held key retries as
// soon as the key is released, instead of sleeping through its retry delay.

import (
	"context"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// releaseChannelPrefix starts the name of every release channel.
const releaseChannelPrefix = "redlock:released:"

// releaseChannel names the pub/sub channel on which releaseScript and
// releaseVouchScript publish each time they delete lock key name (the
// prefix included, see WithPrefix): "redlock:released:" + name. The message
// is "<subscribers> <release id>": the number of connections subscribed to
// the channel on that node (one per Client waiting for the key), and the
// SHA1 of the released owner value in hex, the same on every node, so that a
// waiter can tell one release from another (an owner value that is no
// longer on any node is worth nothing; its hash even less). Keys that expire
// publish nothing.
func releaseChannel(name string) string { return releaseChannelPrefix + name }

// subscriber is the part of a go-redis client that opens a pub/sub
// connection (redis.Client, ClusterClient, Ring, sentinel clients).
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// subscribeTimeout bounds one SUBSCRIBE or UNSUBSCRIBE write, dial included.
// The waiters never wait for it: they sleep their retry delay meanwhile.
const subscribeTimeout = 5 * time.Second

// notifier wakes the Acquire calls of one Client that wait for a held key
// when a majority of nodes announce that they deleted it.
//
// Each node gets at most one pub/sub connection, opened the first time an
// Acquire waits and closed by Client.Close. A key's channel is subscribed on
// every node while at least one Acquire of this Client waits for it, and
// unsubscribed subscriptionLinger after the last one returned (unless
// another came meanwhile): subscriptions live only a little longer than the
// waits (keys holds the waiters of each key).
//
// A waiter is woken when a majority (N/2+1) of nodes have announced the
// same release (told apart by a hash of the owner value) since its last
// attempt began: the condition under which its next attempt can succeed.
// One node's message is not enough, nor are messages of different
// releases: after a split vote, the losers' clean-up frees the minority of
// nodes they held while the winner holds the rest, and waking waiters on
// that would start another round of failed attempts, whose clean-up
// publishes again. Among the waiters of one Client on one key, only the
// longest-waiting one (the head of a FIFO queue) is woken; the others keep
// their retry delay, so that a release does not send every goroutine of the
// process at the key at once (Redisson wakes one waiter per process in the
// same way). Among Clients, the woken waiters thin themselves out (takes).
//
// When a node cannot subscribe (a client without pub/sub, a connection that
// fails, an ACL that forbids SUBSCRIBE), its messages simply never come:
// every wait is bounded by the retry policy's delay in any case, and a key
// that expires without release is found by that delay too.
type notifier struct {
	c *Client

	mu      sync.Mutex
	closed  bool
	started bool
	keys    map[string]*keyWaiters // by channel name
	subs    []*nodeSub             // by node index; nil for a node without pub/sub
	done    chan struct{}          // closed by close
	wg      sync.WaitGroup         // the node goroutines
}

// keyWaiters is the state of one subscribed key.
type keyWaiters struct {
	queue    []*lockWaiter // in order of arrival; the head is the one woken
	clients  int           // Clients waiting for the key, as the last message said
	released uint64        // releases announced by a majority of nodes so far
	// linger unsubscribes the key subscriptionLinger after its last
	// waiter left, unless another came meanwhile; nil until then.
	linger *time.Timer
	recent [8]seenRelease
	next   int // the slot of recent to reuse
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
func (kw *keyWaiters) count(i int, id string, quorum int) bool {
	var r *seenRelease
	for j := range kw.recent {
		if kw.recent[j].id == id {
			r = &kw.recent[j]
			break
		}
	}
	if r == nil {
		r = &kw.recent[kw.next]
		kw.next = (kw.next + 1) % len(kw.recent)
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

// nodeSub is one node's pub/sub connection, used by that node's goroutine
// (run).
type nodeSub struct {
	ps   *redis.PubSub
	kick chan struct{}   // buffered: the set of keys changed
	have map[string]bool // channels subscribed or being subscribed; notifier.mu
}

// lockWaiter is one waiting Acquire. A nil *lockWaiter waits its retry delay only.
type lockWaiter struct {
	n    *notifier
	ch   string
	kw   *keyWaiters
	snap uint64        // kw.released when the current attempt began
	wake chan struct{} // buffered: a majority released since snap
}

// join registers a waiter on lock key name (prefix included) and subscribes
// to its release channel on every node, in the background. It returns nil
// (wait the retry delay only) once the Client is closed or when no node
// supports pub/sub.
func (n *notifier) join(name string) *lockWaiter {
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
	ch := releaseChannel(name)
	kw := n.keys[ch]
	if kw == nil {
		kw = &keyWaiters{}
		n.keys[ch] = kw
		n.kickAll()
	}
	w := &lockWaiter{n: n, ch: ch, kw: kw, snap: kw.released, wake: make(chan struct{}, 1)}
	kw.queue = append(kw.queue, w)
	return w
}

// start opens a pub/sub connection to every node whose client has one, and
// starts each node's goroutine. n.mu is held.
func (n *notifier) start() {
	n.started = true
	n.keys = make(map[string]*keyWaiters)
	n.done = make(chan struct{})
	n.subs = make([]*nodeSub, len(n.c.nodes))
	some := false
	for i, nd := range n.c.nodes {
		s, ok := nd.client.(subscriber)
		if !ok || isNil(s) {
			continue
		}
		ns := &nodeSub{ps: s.Subscribe(context.Background()), kick: make(chan struct{}, 1), have: make(map[string]bool)}
		n.subs[i] = ns
		some = true
		msgs := ns.ps.Channel()
		n.wg.Add(1)
		go n.run(i, ns, msgs)
	}
	if !some {
		n.subs = nil
	}
}

// kickAll tells every node goroutine that the set of keys changed. n.mu is
// held.
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

// run is node i's goroutine: it delivers the node's release messages and
// brings the node's subscriptions in line with the keys waited for.
func (n *notifier) run(i int, ns *nodeSub, msgs <-chan *redis.Message) {
	defer n.wg.Done()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return // the PubSub was closed
			}
			n.deliver(i, m.Channel, m.Payload)
		case <-ns.kick:
			n.reconcile(ns)
		case <-n.done:
			// Wait for go-redis's reader to end: it closes msgs once it
			// sees the PubSub closed (after up to 100 ms of back-off when
			// the node is unreachable), so that nothing outlives Close.
			for range msgs {
			}
			return
		}
	}
}

// reconcile subscribes the node to the keys waited for that it lacks, and
// unsubscribes it from the others.
func (n *notifier) reconcile(ns *nodeSub) {
	var add, drop []string
	n.mu.Lock()
	for ch := range n.keys {
		if !ns.have[ch] {
			add = append(add, ch)
			ns.have[ch] = true
		}
	}
	for ch := range ns.have {
		if n.keys[ch] == nil {
			drop = append(drop, ch)
			delete(ns.have, ch)
		}
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	// go-redis records the channels even when the write fails, and
	// subscribes to them again when it reconnects.
	if len(add) > 0 {
		_ = ns.ps.Subscribe(ctx, add...)
	}
	if len(drop) > 0 {
		_ = ns.ps.Unsubscribe(ctx, drop...)
	}
}

// deliver counts node i's announcement of a release and, once a majority
// of nodes announced that release, wakes the key's head waiter.
func (n *notifier) deliver(i int, ch, payload string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	kw := n.keys[ch]
	if kw == nil {
		return // no longer waited for
	}
	subs, id, _ := strings.Cut(payload, " ")
	if k, err := strconv.Atoi(subs); err == nil {
		kw.clients = k
	}
	if !kw.count(i, id, n.c.quorum) {
		return
	}
	kw.released++
	if len(kw.queue) == 0 {
		return // lingering: nobody waits now
	}
	if h := kw.queue[0]; h.ready() {
		h.signal()
	}
}

// ready reports whether a majority of nodes announced a release since the
// waiter's attempt began. n.mu is held.
func (w *lockWaiter) ready() bool { return w.kw.released > w.snap }

func (w *lockWaiter) signal() {
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
	w.snap = w.kw.released
	w.n.mu.Unlock()
	select {
	case <-w.wake: // a wake-up for the attempt that just ended
	default:
	}
}

// sleep waits for the retry delay d, until ctx ends, or, for the head waiter,
// until a majority of nodes released the key since the last mark, whichever
// comes first. It never waits longer than d.
func (w *lockWaiter) sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	var wake <-chan struct{}
	if w != nil {
		w.n.mu.Lock()
		head := len(w.kw.queue) > 0 && w.kw.queue[0] == w
		now := w.n.closed || head && w.ready()
		w.n.mu.Unlock()
		if now {
			return // released during the attempt, or the Client closed
		}
		wake = w.wake
	}
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-wake:
		}
		if w.n.c.closed.Load() || w.takes() {
			return
		}
		w.mark() // sit this release out: wait for the next one
	}
}

// subscriptionLinger is how long a key stays subscribed after its last
// waiter left.
const subscriptionLinger = time.Second

// perRelease is how many of the Clients waiting for a key try it, on
// average, after each release.
const perRelease = 1

// takes decides whether the woken waiter tries the key now. Every Client
// waiting for the key was woken by the same release, and all but one of
// their attempts would fail (each failure costing an attempt and its
// clean-up on every node): with k Clients waiting, each tries with
// probability perRelease/k, so that about perRelease try. The choice is
// random, hence fair between Clients; a waiter that sits out waits for the
// next release or its retry delay, whichever comes first.
func (w *lockWaiter) takes() bool {
	w.n.mu.Lock()
	k := w.kw.clients
	w.n.mu.Unlock()
	return k <= perRelease || rand.IntN(k) < perRelease
}

// leave removes the waiter; acquired says whether its Acquire got the lock.
// The next waiter becomes the head: if the leaver acquired, the releases it
// saw were spent on its own grant and do not wake the next one. The key is
// unsubscribed once its last waiter left.
func (w *lockWaiter) leave(acquired bool) {
	if w == nil {
		return
	}
	n := w.n
	n.mu.Lock()
	defer n.mu.Unlock()
	kw := w.kw
	wasHead := len(kw.queue) > 0 && kw.queue[0] == w
	if i := slices.Index(kw.queue, w); i >= 0 {
		kw.queue = slices.Delete(kw.queue, i, i+1)
	}
	if len(kw.queue) == 0 {
		if n.keys[w.ch] != kw {
			return
		}
		if n.closed {
			delete(n.keys, w.ch)
			return
		}
		// Keep the subscription a while: a Client that waits for a key
		// often waits for it again soon (it released it, or another of its
		// calls comes), and then finds it subscribed already.
		if kw.linger == nil {
			ch := w.ch
			kw.linger = time.AfterFunc(subscriptionLinger, func() { n.drop(ch, kw) })
		} else {
			kw.linger.Reset(subscriptionLinger)
		}
		return
	}
	if wasHead {
		h := kw.queue[0]
		if acquired {
			h.snap = kw.released
		} else if h.ready() {
			h.signal()
		}
	}
}

// drop forgets key channel ch, and unsubscribes from it, if nobody waited
// for it since its last waiter left.
func (n *notifier) drop(ch string, kw *keyWaiters) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed || len(kw.queue) > 0 || n.keys[ch] != kw {
		return
	}
	delete(n.keys, ch)
	n.kickAll()
}

// close ends the pub/sub connections and their goroutines, and wakes every
// waiter (its Acquire then returns ErrClosed).
func (n *notifier) close() {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return
	}
	n.closed = true
	started := n.started
	subs := n.subs
	for _, kw := range n.keys {
		for _, w := range kw.queue {
			w.signal()
		}
		if kw.linger != nil {
			kw.linger.Stop()
		}
	}
	if started {
		close(n.done)
	}
	n.mu.Unlock()
	for _, ns := range subs {
		if ns != nil {
			_ = ns.ps.Close()
		}
	}
	n.wg.Wait()
}
