package nodecall

import (
	"sync"
	"sync/atomic"
	"time"
)

// Tracker counts a client's operations and node-call batches in flight, so
// that closing the client waits for them (within the longest per-node
// timeout they used), and stops the calls still running at that bound. Its
// zero value is not usable: Init it.
type Tracker struct {
	closed atomic.Bool
	// mu guards the count of operations and node-call batches in flight;
	// idle is closed when it drops to zero while Close waits.
	mu       sync.Mutex
	inflight int
	idle     chan struct{}
	// longest is the longest per-node timeout (ns) an operation began
	// with: how long Close waits for the calls in flight.
	longest atomic.Int64
	// linger lists the lingering votes whose calls still wait for a reply
	// (Vote.Linger); abandoned is set, and stopped closed, once Close
	// stopped waiting for the calls (StopCalls).
	lingerMu  sync.Mutex
	linger    map[*Ballot]struct{}
	abandoned bool
	stopped   chan struct{}
	// done is untrack, bound once: Track and Begin hand it out, and a
	// method value made per call would allocate (two votes and two
	// operations per acquire + release).
	done func()
}

// Init readies t for use.
func (t *Tracker) Init() {
	t.stopped = make(chan struct{})
	t.done = t.untrack
}

// Stopped is closed once StopCalls ran: the queues' waits then end.
func (t *Tracker) Stopped() <-chan struct{} { return t.stopped }

// Closed reports whether Close has begun.
func (t *Tracker) Closed() bool { return t.closed.Load() }

// Track counts one more batch of node calls in flight, so that Close waits
// for it, and returns the function to call when it ends. While anything is
// in flight it always counts, even once Close has begun: the batches of an
// operation that got past Begin (its votes, their stragglers, late grants'
// clean-up) are waited for like the operation itself. Once Close has seen
// nothing in flight it counts nothing: the calls then fail fast on the
// closed connections (or run on the caller's own clients).
func (t *Tracker) Track() (done func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() && t.inflight == 0 {
		return func() {}
	}
	t.inflight++
	return t.done
}

// untrack ends what Track or Begin counted.
func (t *Tracker) untrack() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.inflight--; t.inflight == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// Begin counts one more operation in flight, as Track does, and reports
// whether the client was still open: an operation that checked "not
// closed" and then started its votes could otherwise see a Close that ran
// entirely in between (it would wait for nothing, and the operation's node
// calls would fail on closed connections). An operation holds what Begin
// returns until it has started its votes, which are tracked themselves.
// timeout is the operation's per-node timeout, which bounds Close's wait.
func (t *Tracker) Begin(timeout time.Duration) (done func(), open bool) {
	t.NoteTimeout(timeout)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Load() {
		return func() {}, false
	}
	t.inflight++
	return t.done, true
}

// NoteTimeout records a per-node timeout the client's calls use: Close
// waits for them up to the longest.
func (t *Tracker) NoteTimeout(timeout time.Duration) {
	for old := t.longest.Load(); int64(timeout) > old && !t.longest.CompareAndSwap(old, int64(timeout)); old = t.longest.Load() {
	}
}

// Close marks the client closed and returns a channel closed once nothing
// is in flight, and how long to wait for that at most (the longest
// per-node timeout noted); first is false when Close had begun already.
func (t *Tracker) Close() (idle <-chan struct{}, bound time.Duration, first bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed.Swap(true) {
		return nil, 0, false
	}
	ch := make(chan struct{})
	if t.inflight > 0 {
		t.idle = ch
	} else {
		close(ch)
	}
	return ch, time.Duration(t.longest.Load()), true
}

// lingering records b, a lingering vote, among those whose calls StopCalls
// stops; once it has, it stops b's calls at once.
func (t *Tracker) lingering(b *Ballot) {
	t.lingerMu.Lock()
	defer t.lingerMu.Unlock()
	if t.abandoned {
		b.cancel()
		return
	}
	if t.linger == nil {
		t.linger = make(map[*Ballot]struct{})
	}
	t.linger[b] = struct{}{}
	b.lingers = t
}

// lingered forgets b once its calls have all returned.
func (t *Tracker) lingered(b *Ballot) {
	t.lingerMu.Lock()
	defer t.lingerMu.Unlock()
	delete(t.linger, b)
}

// StopCalls ends what the client's calls may still wait for: the lingering
// votes' calls (their context), and the waits for a node's turn. Close
// calls it at its bound; it is idempotent.
func (t *Tracker) StopCalls() {
	t.lingerMu.Lock()
	if t.abandoned {
		t.lingerMu.Unlock()
		return
	}
	t.abandoned = true
	close(t.stopped)
	votes := make([]*Ballot, 0, len(t.linger))
	for b := range t.linger {
		votes = append(votes, b)
	}
	t.lingerMu.Unlock()
	for _, b := range votes {
		b.cancel()
	}
}
