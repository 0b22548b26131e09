package nodecall

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Reply is what one node call returns: the script's answer on that node
// (Code and the values read with it), or the call's error.
type Reply struct {
	Idx     int    // the node's index (set by the vote)
	Code    int64  // the script's return code, when Err is nil
	Counter uint64 // fencing counter read by the acquire script
	Epoch   int64  // epoch state read by the acquire script
	Left    time.Duration
	Err     error
	Latency time.Duration // set by the vote
	// Shed: the call was not sent to the node (Engine.EnterAcquire), its
	// own backlog on the node being full while a majority kept up. The
	// vote does not pass it to Counter.Record, and leaves the node
	// unanswered: the client's own queueing is not the node timing out.
	Shed bool
}

// Op runs one operation against one node with the given context.
type Op func(ctx context.Context, n *Node) Reply

// Counter is the caller's side of a vote: what the replies mean, and when
// they decide it. The vote calls it from the goroutine that counts only.
type Counter interface {
	// Record counts one node's reply (never a shed one); ctx is the
	// caller's.
	Record(ctx context.Context, r Reply)
	// Decided reports whether the replies so far decide the vote;
	// answered counts them, shed ones included.
	Decided(answered int) bool
	// Unanswered marks the nodes that had not answered when the clock or
	// the caller (ctx, the caller's) decided the vote; shed[i] (shed may be
	// nil) tells a node the call was never sent to.
	Unanswered(ctx context.Context, shed []bool)
}

// Vote is how a vote's node calls run and what becomes of the replies that
// come after it was decided.
type Vote struct {
	// Timeout is the per-node timeout.
	Timeout time.Duration
	// Op is the call made on every node.
	Op Op
	// Late receives, in the goroutine that received it, each reply that
	// arrives after the decision; nil drops them.
	Late func(Reply)
	// KeepLate hands those replies over on Ballot.Replies instead (one per
	// node at most, so none is ever blocked), for a caller that goes on
	// counting them.
	KeepLate bool
	// Linger, when not zero, makes the calls wait for their node's reply
	// until then, however the vote went (a vote whose calls create keys):
	// a reply that comes after the decision, or after the caller's context
	// ended, still reaches Late. Close stops the calls at its bound.
	Linger time.Time
}

// Ballot is the state one vote shares with its node calls. The caller
// allocates it with its own tally, in one allocation, and starts it
// (Engine.Start).
type Ballot struct {
	counter  Counter
	answered int // replies recorded, read by the decision loop only
	// shed[i]: node i's call was never sent (Reply.Shed); made by the
	// first such reply, so a vote without one allocates nothing.
	shed []bool

	mu      sync.Mutex
	closed  bool // decided: replies go to late
	replies chan Reply
	late    func(Reply)
	keep    bool // once decided, replies still go to replies (Vote.KeepLate)

	ctx     context.Context // the node calls' context: per-node timeout
	expired <-chan struct{} // fires at the per-node timeout or when the caller's context ends
	cancel  context.CancelFunc
	untrack func()
	done    chan struct{}
	running atomic.Int32 // node calls not finished yet
	// linger: the calls wait for their reply (Vote.Linger); lingers is
	// then the Tracker, which keeps the vote among those Close may stop
	// (Tracker.lingering) until its calls have returned.
	linger  bool
	lingers *Tracker
	// caller is the context the vote was started with, told with each
	// reply to onReply (Engine.Answered) when that is not nil.
	caller  context.Context
	onReply func(context.Context, Reply)
}

// Start starts one node call per node for b, whose replies counter counts.
func (e *Engine) Start(ctx context.Context, b *Ballot, counter Counter, v Vote) {
	n := len(e.Nodes)
	b.counter, b.replies, b.late, b.keep, b.done = counter, make(chan Reply, n), v.Late, v.KeepLate, make(chan struct{})
	b.caller, b.onReply = ctx, e.Answered
	// One goroutine per node call and no other: the last call to finish
	// ends the vote's context and closes done (no waiter goroutine).
	b.ctx, b.expired, b.cancel = e.lingerContext(ctx, v.Timeout, v.Linger)
	b.untrack = e.Track()
	if b.linger = !v.Linger.IsZero(); b.linger {
		e.lingering(b)
	}
	b.running.Store(int32(n))
	for i, nd := range e.Nodes {
		go b.call(i, nd, v.Op)
	}
}

// Count records the replies until the vote is decided, then hands the
// later ones over to Late (or Replies). ctx is the caller's context the
// vote was started with. It returns the channel closed once every node call
// of the vote has finished and every Late callback has run; the Tracker
// counts them too, so Close waits for them.
func (b *Ballot) Count(ctx context.Context) <-chan struct{} {
	// expired fires at the per-node timeout (after the wait for a slot on
	// nodes with a queue, see nodeContext) or when ctx ends, whichever is
	// first, even if a node call ignores its context (a user's client
	// without ContextTimeoutEnabled).
	byClock := false
	for !byClock && !b.counter.Decided(b.answered) {
		select {
		case r := <-b.replies:
			b.record(ctx, r)
		case <-b.expired:
			// expired also fires when the last node call has finished
			// (call cancels the vote's context): every reply is then
			// queued and counted below, and Unanswered finds no node
			// pending but those never asked (shed), which it leaves so.
			byClock = true
		}
	}

	b.mu.Lock()
	b.closed = true
	// Replies queued before the decision still count: a node that answered
	// in time must not be reported as timed out.
	for len(b.replies) > 0 {
		b.record(ctx, <-b.replies)
	}
	b.mu.Unlock()

	if byClock {
		b.counter.Unanswered(ctx, b.shed)
	}
	return b.done
}

// Expired is closed once the vote's wait for its calls is over: every call
// returned or outlived the per-node timeout (a lingering vote's, from its
// slot), or the caller's context ended.
func (b *Ballot) Expired() <-chan struct{} { return b.expired }

// Done is closed once every node call of the vote has finished (and every
// Late callback has run); Count returns it too.
func (b *Ballot) Done() <-chan struct{} { return b.done }

// Context is the context the vote's node calls run on (WaitsForTurn).
func (b *Ballot) Context() context.Context { return b.ctx }

// Replies carries the replies that come after the decision (Vote.KeepLate).
func (b *Ballot) Replies() <-chan Reply { return b.replies }

// record counts one node's reply.
func (b *Ballot) record(ctx context.Context, r Reply) {
	b.answered++
	if r.Shed {
		if b.shed == nil {
			b.shed = make([]bool, cap(b.replies))
		}
		b.shed[r.Idx] = true
		return // pending; not an answer of the node's (see Reply.Shed)
	}
	b.counter.Record(ctx, r)
}

// call runs op on node i and delivers its reply; the last call to finish
// ends the vote's context, closes done, and lets Close go.
func (b *Ballot) call(i int, nd *Node, op Op) {
	growStack()
	start := time.Now()
	r := op(b.ctx, nd)
	r.Idx, r.Latency = i, time.Since(start)
	if b.onReply != nil {
		b.onReply(b.caller, r)
	}
	b.deliver(r)
	if b.linger {
		// After deliver: the vote may end once every call returned, and
		// must find their replies queued.
		lingerReturned(b.ctx, nd) // queue.go
	}
	if b.running.Add(-1) == 0 {
		b.cancel()
		if b.lingers != nil {
			b.lingers.lingered(b)
		}
		close(b.done)
		b.untrack()
	}
}

// deliver hands a reply to the decision loop, or to late once the vote is
// decided; the mutex makes the hand-over exact.
func (b *Ballot) deliver(r Reply) {
	b.mu.Lock()
	if !b.closed || b.keep {
		b.replies <- r // room for one reply per node
		b.mu.Unlock()
		return
	}
	b.mu.Unlock()
	if b.late != nil {
		b.late(r)
	}
}

// CallerEnded returns the caller's context error, or DeadlineExceeded once
// its deadline has passed even if its timer has not fired yet (the node
// context's timer for the same instant may fire first).
func CallerEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// stackHint is the stack frame growStack takes: with what is already on
// the stack, enough for the runtime to grow a new goroutine's stack to 16 KB
// in one step, which holds go-redis's call path from the node call down to
// the socket read.
const stackHint = 12 << 10

// growStack grows the calling goroutine's stack while it is still shallow.
// A new goroutine starts with a small stack, and a node call would
// otherwise grow it by doubling in the middle of go-redis's deep call path,
// copying every frame each time: runtime.newstack took 16.8 % of the C1
// benchmark's CPU samples, 3.4 % with this (a CPU profile of bench/'s
// case C1). A goroutine whose stack is already large enough only
// zeroes the frame.
//
//go:noinline
func growStack() byte {
	var pad [stackHint]byte
	return pad[len(pad)-1] + sink(pad[:])
}

// sink keeps growStack's frame: the compiler cannot drop an array that a
// call it does not inline reads.
//
//go:noinline
func sink(b []byte) byte { return b[0] }
