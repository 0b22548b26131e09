package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Outcome is what one node answered to one operation (acquire, extend,
// release or fencing write-back).
type Outcome int

// The outcomes a node can report. OutcomePending means the node had not
// answered when the vote was decided: Redlock does not wait for stragglers.
// An acquisition also leaves pending a node it did not ask because this
// Client's calls to it were backed up (as many still running after their
// votes were decided as its connection pool's size, while a majority of the
// nodes kept up; or, on the nodes Dial connects to, every connection waiting
// for a reply past the per-node timeout), or because the same Acquire's
// previous call there still waited for its reply: the client's own backlog,
// not a timeout of the node's.
const (
	OutcomePending     Outcome = iota // no reply before the vote was decided
	OutcomeGranted                    // the operation applied: key set, extended, released or fenced
	OutcomeTaken                      // the key is held by another owner value
	OutcomeNotHeld                    // the key is not there: expired, released, never set
	OutcomeUnreachable                // connection refused, reset or closed
	OutcomeTimedOut                   // no reply within the per-node timeout
	OutcomeCanceled                   // the caller's context ended first
	OutcomeError                      // the node answered with an error (script, auth, OOM...)
	// OutcomeQuarantined: the node set the key, but its vote does not count
	// because it may have lost its data (amnesia guard): its copy of the
	// key's history was created recently and no successful acquisition has
	// vouched for it yet. NodeResult.QuarantineLeft says for how long.
	OutcomeQuarantined
)

var outcomeNames = [...]string{"pending", "granted", "taken", "not-held", "unreachable", "timed-out", "canceled", "error", "quarantined"}

// String returns a short lower-case name such as "granted" or "timed-out".
func (o Outcome) String() string {
	if o < 0 || int(o) >= len(outcomeNames) {
		return "unknown"
	}
	return outcomeNames[o]
}

// NodeResult is one node's answer to one operation.
type NodeResult struct {
	// Node names the node: its address (never its password) or the name the
	// client was given.
	Node string
	// Outcome is the typed result.
	Outcome Outcome
	// Err is the underlying error for OutcomeUnreachable, OutcomeTimedOut,
	// OutcomeCanceled and OutcomeError; nil otherwise.
	Err error
	// Latency is how long the node took to answer; zero when it did not.
	Latency time.Duration
	// QuarantineLeft is, for OutcomeQuarantined, how much longer the node's
	// votes for this key are not counted unless a successful acquisition
	// vouches for it first (see WithQuarantine); zero otherwise.
	QuarantineLeft time.Duration
}

// reply is what a node call returns before it becomes a NodeResult.
type reply struct {
	idx     int
	code    int64  // codeApplied, codeNotHeld, codeTaken or codeQuarantined when err is nil
	counter uint64 // fencing counter read by the acquire script
	epoch   int64  // epoch state read by the acquire script (epochTrusted...)
	left    time.Duration
	err     error
	latency time.Duration
	// shed: the acquisition was not sent to the node (errShed, Client.enter),
	// its own backlog on the node being full while a majority kept up. The
	// vote counts it as no grant and leaves the node pending: the client's
	// own queueing is not the node timing out.
	shed bool
}

// tally is the state of one vote: every node's result so far, and the
// fencing counters and epoch states reported by granting nodes.
type tally struct {
	results  []NodeResult
	counters []uint64
	epochs   []uint64 // epochTrusted...; uint64 to share the counters' allocation
	granted  int
	// fresh counts quarantined grants from nodes that created the key's
	// epoch just now; others counts every other answer (errors aside);
	// failed the nodes unreachable, timed out or answering an error.
	fresh, others, failed int
	need                  int
}

// brandNew reports whether the key is new to the cluster: at least a
// majority of nodes answered, every answer said the key's epoch was created
// just now, and no node reported any history (an epoch, or the key taken).
// Only unreachable nodes could then hold history, and they are a minority,
// while a key's history is on at least a majority (every node that ever
// granted it). So unless a majority of the nodes that hold it lost their data
// or are unreachable at once, the key has never been locked.
func (t *tally) brandNew() bool { return t.others == 0 && t.fresh >= t.need }

// nodeOp runs one operation against one node with the given context.
type nodeOp func(ctx context.Context, n *node) reply

// voteQuorum sends op to every node at once and returns as soon as the
// outcome is known: a majority (the quorum) applied it, or so many refused
// or failed that the quorum can no longer be reached, or the per-node
// timeout or ctx ended (pending nodes are then marked timed out or
// canceled). It does not wait for stragglers: replies that arrive after the
// decision are passed to late, in the goroutine that received them; late
// may be nil.
//
// The returned channel is closed once every node call of this vote has
// finished (each is bounded by the per-node timeout) and every late callback
// has run. The client's WaitGroup also tracks them, so Close waits for them
// too. A channel, not a function: a caller that makes many votes keeps only
// those not yet done, and nothing of a finished vote stays reachable.
func (c *Client) voteQuorum(ctx context.Context, timeout time.Duration, op nodeOp, late func(reply)) (*tally, <-chan struct{}) {
	return c.startVote(ctx, timeout, c.quorum, false, op, late, false, time.Time{}).count(ctx)
}

// voteQuorumKeep is voteQuorum handing the replies that arrive after the
// decision over on the returned channel (one per node at most, so none is
// ever blocked), for a caller that goes on counting them: no callback and
// no channel of its own to allocate.
func (c *Client) voteQuorumKeep(ctx context.Context, timeout time.Duration, op nodeOp) (*tally, <-chan reply) {
	b := c.startVote(ctx, timeout, c.quorum, false, op, nil, true, time.Time{})
	t, _ := b.count(ctx)
	return t, b.replies
}

// voteAcquire is voteQuorum for an acquisition attempt, whose calls create
// keys: each node call waits for its node's reply until linger, however the
// vote went, so that a grant whose reply comes after the vote was decided
// (or after ctx ended) still reaches late, which can then take it back; and
// a vote that cannot be won is decided only once it also tells why
// (ballot.why). The returned channel is closed once every call has returned
// or outlived the vote's wait for it (the per-node timeout, or ctx's end);
// Close stops the calls still waiting at its bound.
func (c *Client) voteAcquire(ctx context.Context, timeout time.Duration, linger time.Time, op nodeOp, late func(reply)) (*tally, <-chan struct{}) {
	b := c.startVote(ctx, timeout, c.quorum, false, op, late, false, linger)
	b.why = true // read by count only, in this goroutine
	t, _ := b.count(ctx)
	return t, b.expired
}

// voteAll is voteQuorum waiting for every node's answer, up to the
// per-node timeout, for the operations that want every node (a failed
// acquisition's clean-up, putting keys back after an extension).
func (c *Client) voteAll(ctx context.Context, timeout time.Duration, op nodeOp) (*tally, <-chan struct{}) {
	return c.startVote(ctx, timeout, len(c.nodes), true, op, nil, false, time.Time{}).count(ctx)
}

// startVote makes the ballot and starts one node call per node; a non-zero
// linger makes the calls lingering (voteAcquire).
func (c *Client) startVote(ctx context.Context, timeout time.Duration, need int, all bool, op nodeOp, late func(reply), keep bool, linger time.Time) *ballot {
	n := len(c.nodes)
	b := &ballot{replies: make(chan reply, n), late: late, keep: keep, done: make(chan struct{}), all: all}
	t := &b.tally
	both := make([]uint64, 2*n) // counters and epochs, in one allocation
	t.results, t.counters, t.epochs, t.need = make([]NodeResult, n), both[:n:n], both[n:], need
	for i, nd := range c.nodes {
		t.results[i] = NodeResult{Node: nd.name, Outcome: OutcomePending}
	}
	// One goroutine per node call and no other: the last call to finish
	// ends the vote's context and closes done (no waiter goroutine).
	b.ctx, b.expired, b.cancel = c.lingerContext(ctx, timeout, linger) // nodequeue.go
	b.untrack = c.track()
	if b.linger = !linger.IsZero(); b.linger {
		c.lingering(b)
	}
	b.running.Store(int32(n))
	for i, nd := range c.nodes {
		go b.call(i, nd, op)
	}
	return b
}

// count records the replies until the vote is decided, then hands the
// later ones over to late. ctx is the caller's context the vote was
// started with.
func (b *ballot) count(ctx context.Context) (*tally, <-chan struct{}) {
	// expired fires at the per-node timeout (after the wait for a slot on
	// nodes with a queue, see nodeContext) or when ctx ends, whichever is
	// first, even if a node call ignores its context (a user's client
	// without ContextTimeoutEnabled).
	byClock := false
	for !byClock && !b.decided() {
		select {
		case r := <-b.replies:
			b.record(ctx, r)
		case <-b.expired:
			// expired also fires when the last node call has finished
			// (call cancels the vote's context): every reply is then
			// queued and counted below, and markPending finds no node
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
		b.markPending(ctx)
	}
	return &b.tally, b.done
}

// record counts one node's reply.
func (b *ballot) record(ctx context.Context, r reply) {
	t := &b.tally
	b.answered++
	if r.shed {
		if b.shed == nil {
			b.shed = make([]bool, len(t.results))
		}
		b.shed[r.idx] = true
		return // pending; not an answer of the node's (see reply.shed)
	}
	res := &t.results[r.idx]
	res.Outcome, res.Err, res.Latency = classify(r), r.err, r.latency
	if res.Outcome == OutcomeTimedOut {
		// The caller's deadline cuts a node call short just as the
		// per-node timeout would: say whose deadline it was.
		if cause := callerEnded(ctx); cause != nil {
			res.Outcome, res.Err = OutcomeCanceled, fmt.Errorf("%w: %w", cause, r.err)
		}
	}
	t.counters[r.idx], t.epochs[r.idx] = r.counter, uint64(r.epoch)
	switch res.Outcome {
	case OutcomeGranted:
		t.granted++
	case OutcomeQuarantined:
		res.QuarantineLeft = r.left
	}
	switch {
	case r.err != nil:
		if res.Outcome != OutcomeCanceled {
			t.failed++
		}
	case res.Outcome == OutcomeQuarantined && r.epoch == epochNew:
		t.fresh++
	default:
		t.others++
	}
}

// decided reports whether the answers so far decide the vote: every node
// answered, or (voteQuorum) the quorum was reached or can no longer be.
func (b *ballot) decided() bool {
	t, n := &b.tally, len(b.results)
	if b.all {
		return b.answered == n
	}
	// While every answer so far is a fresh epoch, the key may be brand
	// new: that needs every node's answer (or its timeout), since one
	// late node with history decides it is not.
	possible := t.granted + (n - b.answered)
	if t.others == 0 {
		possible += t.fresh
	}
	if t.granted >= t.need || b.answered == n {
		return true
	}
	if possible >= t.need {
		return false
	}
	// Lost. With why, only once a majority answered (the nodes' refusals
	// decided it) or the nodes that failed are too many for one to answer
	// (an outage): QuorumError tells ErrTaken from ErrNoQuorum by that.
	return !b.why || t.fresh+t.others >= t.need || t.failed > n-t.need
}

// markPending marks the nodes that had not answered when the clock or the
// caller decided the vote: timed out, or canceled when the caller's context
// ended. A node the call was never sent to (shed) stays pending.
func (b *ballot) markPending(ctx context.Context) {
	pending, cause := OutcomeTimedOut, error(context.DeadlineExceeded)
	if err := callerEnded(ctx); err != nil {
		pending, cause = OutcomeCanceled, err
	}
	for i := range b.results {
		if b.results[i].Outcome == OutcomePending && (b.shed == nil || !b.shed[i]) {
			b.results[i].Outcome, b.results[i].Err = pending, cause
		}
	}
}

// ballot is the state one vote shares with its node calls, in one
// allocation: the tally the decision loop fills, and the hand-over of
// replies to it (or to late, once decided).
type ballot struct {
	tally
	all      bool // voteAll: decided only once every node answered
	why      bool // voteAcquire: a lost vote also waits until it tells why
	answered int  // replies recorded, read by the decision loop only
	// shed[i]: node i's call was never sent (reply.shed); made by the
	// first such reply, so a vote without one allocates nothing.
	shed []bool

	mu      sync.Mutex
	closed  bool // decided: replies go to late
	replies chan reply
	late    func(reply)
	keep    bool // once decided, replies still go to replies (voteQuorumKeep)

	ctx     context.Context // the node calls' context: per-node timeout
	expired <-chan struct{} // fires at the per-node timeout or when the caller's context ends
	cancel  context.CancelFunc
	untrack func()
	done    chan struct{}
	running atomic.Int32 // node calls not finished yet
	// linger: the calls wait for their reply (voteAcquire); lingers is then
	// the Client, which keeps the vote among those Close may stop
	// (Client.lingering) until its calls have returned.
	linger  bool
	lingers *Client
}

// call runs op on node i and delivers its reply; the last call to finish
// ends the vote's context, closes done, and lets Close go.
func (b *ballot) call(i int, nd *node, op nodeOp) {
	growStack()
	start := time.Now()
	r := op(b.ctx, nd)
	r.idx, r.latency = i, time.Since(start)
	b.deliver(r)
	if b.linger {
		// After deliver: the vote may end once every call returned, and
		// must find their replies queued.
		lingerReturned(b.ctx, nd) // nodequeue.go
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
func (b *ballot) deliver(r reply) {
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

// callerEnded returns the caller's context error, or DeadlineExceeded once
// its deadline has passed even if its timer has not fired yet (the node
// context's timer for the same instant may fire first).
func callerEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// classify turns a node reply into an Outcome.
func classify(r reply) Outcome {
	if r.err == nil {
		switch r.code {
		case codeApplied, codeHandedOff:
			return OutcomeGranted
		case codeTaken:
			return OutcomeTaken
		case codeQuarantined:
			return OutcomeQuarantined
		default:
			return OutcomeNotHeld
		}
	}
	var netErr net.Error
	switch {
	case errors.Is(r.err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(r.err, context.DeadlineExceeded), errors.As(r.err, &netErr) && netErr.Timeout():
		return OutcomeTimedOut
	}
	var redisErr redis.Error
	if errors.As(r.err, &redisErr) {
		return OutcomeError
	}
	return OutcomeUnreachable
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
// benchmark's CPU samples, 3.4 % with this (docs/performance.md, "CPU
// profile of C1"). A goroutine whose stack is already large enough only
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
