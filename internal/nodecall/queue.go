package nodecall

// The per-node timeout measures the node, not the client's own queue. A
// go-redis client runs at most PoolSize commands on a node at once; the rest
// wait in its pool, and a deadline set before that wait is spent there: a
// burst of acquisitions on healthy nodes then reports them timed out, and
// every failed attempt's clean-up adds to the queue. So on the nodes Dial
// connects to, a command first takes one of the node's PoolSize slots, and
// its per-node timeout starts when it has one (the pool then always has a
// connection for it). The wait is bounded by what the operation can afford,
// and counts in the elapsed time that validity subtracts: it is measured from
// the attempt's start, as before.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// queueSlack is how late after its vote's start a command may get its slot
// and still run on the vote's own deadline: less than this is goroutine
// start-up, not queueing, and saves a context per command.
const queueSlack = time.Millisecond

// Queue admits at most size commands at once to one node: a go-redis
// hook on a client Dial made, before the client's pool hands out a
// connection. Waiting commands are admitted in the order of their turn (see
// turn), not of their arrival: every node of a Client then serves the same
// attempts first, and the calls that fit in an attempt's budget on one node
// belong to the attempts that fit on the others, so they make majorities.
// In arrival order each node would serve a different subset of the waiting
// attempts, and few of them would reach a majority in time.
//
// Whoever frees a slot hands it to the first waiter by closing that
// waiter's channel: no goroutine beyond the waiting caller, and a wait that
// testing/synctest sees as durably blocked.
type Queue struct {
	size int
	// stopped, when closed, ends every wait for a slot (Client.Close, at
	// its bound): the command is not sent.
	stopped <-chan struct{}
	stopErr error // what a wait that stopped returns
	// stale counts the slots held by a lingering vote's calls that have
	// outlived the per-node timeout and still wait for a reply (lingerVote).
	stale   atomic.Int32
	mu      sync.Mutex
	busy    int     // slots taken; while a command waits, busy == size
	waiting waiters // a min-heap on turn
	// overdue is closed while every slot is held by a stale call: the
	// acquisition calls waiting for a slot then give up (ErrOverdue), as
	// Engine.EnterAcquire sheds the new ones. Made by the first such call
	// to wait (nil until then), and again once a slot is no longer stale.
	overdue       chan struct{}
	overdueClosed bool
}

// addStale adds delta to the count of stale slots, and closes overdue
// when every slot is stale.
func (q *Queue) addStale(delta int32) {
	q.mu.Lock()
	defer q.mu.Unlock()
	full := int(q.stale.Add(delta)) >= q.size
	switch {
	case q.overdue == nil:
	case full && !q.overdueClosed:
		close(q.overdue)
		q.overdueClosed = true
	case !full && q.overdueClosed:
		q.overdue, q.overdueClosed = nil, false
	}
}

// overdueChan returns the channel closed while every slot is stale (see
// Queue.overdue), closed already if they are now.
func (q *Queue) overdueChan() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.overdue == nil {
		q.overdue = make(chan struct{})
		if int(q.stale.Load()) >= q.size {
			close(q.overdue)
			q.overdueClosed = true
		}
	}
	return q.overdue
}

// NewQueue returns the queue of one node whose client runs at most size
// commands at once (its connection pool's size); stopped, when closed, ends
// every wait for a slot with an error that wraps ErrNotSent and closed.
func NewQueue(size int, stopped <-chan struct{}, closed error) *Queue {
	return &Queue{size: max(size, 1), stopped: stopped,
		stopErr: fmt.Errorf("%w: the client was closed while the call waited for a free connection: %w", ErrNotSent, closed)}
}

// turn is a command's place in the queues of a Client's nodes: the start of
// the attempt (or vote) it belongs to, ties broken by a sequence number
// taken at that start. Every node call of one vote carries the same turn,
// so all the nodes order them alike.
type turn struct {
	at  time.Time
	seq uint64
}

// turnSeq numbers turns. It is shared by every Client, which keeps it
// strictly increasing within each.
var turnSeq atomic.Uint64

func nextTurn(at time.Time) turn { return turn{at: at, seq: turnSeq.Add(1)} }

func (t turn) before(u turn) bool {
	if !t.at.Equal(u.at) {
		return t.at.Before(u.at)
	}
	return t.seq < u.seq
}

// waiter is one command waiting for a slot.
type waiter struct {
	turn
	ready chan struct{} // closed when the waiter has been given a slot
	i     int           // index in Queue.waiting; -1 once out of it
}

type waiters []*waiter

func (w waiters) Len() int           { return len(w) }
func (w waiters) Less(i, j int) bool { return w[i].before(w[j].turn) }
func (w waiters) Swap(i, j int) {
	w[i], w[j] = w[j], w[i]
	w[i].i, w[j].i = i, j
}
func (w *waiters) Push(x any) {
	x.(*waiter).i = len(*w)
	*w = append(*w, x.(*waiter))
}
func (w *waiters) Pop() any {
	old := *w
	x := old[len(old)-1]
	old[len(old)-1] = nil
	*w = old[:len(old)-1]
	x.i = -1
	return x
}

// take takes a free slot (nil) or queues a waiter for one. The waiter's turn
// is nc's, or for a command outside a vote, its arrival.
func (q *Queue) take(nc *nodeCall) *waiter {
	if nc == nil {
		return q.takeTurn(nil)
	}
	return q.takeTurn(&nc.turn)
}

// takeTurn is take with the waiter's turn given (nil: its arrival).
func (q *Queue) takeTurn(t *turn) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy < q.size {
		q.busy++
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	if t != nil {
		w.turn = *t
	} else {
		w.turn = nextTurn(time.Now())
	}
	heap.Push(&q.waiting, w)
	return w
}

// free frees a slot: it goes to the first waiter, if any.
func (q *Queue) free() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiting) == 0 {
		q.busy--
		return
	}
	close(heap.Pop(&q.waiting).(*waiter).ready)
}

// leave takes w out of the queue. If w was given its slot meanwhile, it
// frees it for the next waiter.
func (q *Queue) leave(w *waiter) {
	q.mu.Lock()
	if w.i >= 0 {
		heap.Remove(&q.waiting, w.i)
		q.mu.Unlock()
		return
	}
	q.mu.Unlock()
	q.free()
}

// DialHook implements redis.Hook: dials are not limited.
func (q *Queue) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook: the command waits for a slot.
func (q *Queue) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		a, err := q.admit(ctx)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		defer q.exit(a)
		return next(a.ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline holds one
// connection, so it takes one slot.
func (q *Queue) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		a, err := q.admit(ctx)
		if err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		defer q.exit(a)
		return next(a.ctx, cmds)
	}
}

// callKey is the context key that the contexts of this file answer with
// themselves (*nodeCall, *cleanupCall, *admitted): one lookup tells a
// command's vote, and whether the command runs inside one that holds a
// slot.
type callKey struct{}

// admitted is the context of a command that holds a slot of q and runs on a
// context of its own (it waited for its slot, or came late, or belongs to no
// vote). go-redis sends commands of its own within it through the same hooks
// (HELLO, and a pipeline, when it opens a connection for the command): they
// run on the command's connection and must not wait for a slot of their own,
// or a full queue of new connections would wait for itself until the
// deadline. A vote's command that got its slot at once runs on the vote's
// own context instead, and the vote records the slot it holds (nodeCall.hold).
type admitted struct {
	context.Context
	q *Queue
}

func (a *admitted) Value(key any) any {
	if key == (callKey{}) {
		return a
	}
	return a.Context.Value(key)
}

// admission is how a command runs once admit let it: on which context, and
// what exit undoes. A value, so that the common case allocates nothing.
type admission struct {
	ctx    context.Context
	inside bool               // runs inside a command that holds the slot: nothing to free
	held   *nodeCall          // holds the slot for this vote (nodeCall.hold)
	cancel context.CancelFunc // ends ctx, the command's own context
}

// exit frees what admit took.
func (q *Queue) exit(a admission) {
	if a.inside {
		return
	}
	if a.held != nil {
		a.held.unhold(q)
	}
	if a.cancel != nil {
		a.cancel()
	}
	q.free()
}

// admit waits for a slot and says how to run the command. In a vote (ctx is
// a *nodeCall) the wait ends at the vote's queue deadline, and a command that
// waited gets a whole per-node timeout from the moment it has its slot; a
// clean-up (a *cleanupCall) waits until its key would expire anyway, and then
// has a per-node timeout; any other command (a late grant's follow-up, for
// instance) waits within its own context. A vote's command that finds a slot
// free within queueSlack of the vote's start runs on the vote's context as it
// is: no allocation on the path nearly every command takes.
func (q *Queue) admit(ctx context.Context) (admission, error) {
	var (
		nc *nodeCall
		cc *cleanupCall
	)
	switch v := ctx.Value(callKey{}).(type) {
	case *nodeCall:
		nc = v
	case *cleanupCall:
		nc, cc = v.nc, v
	case *admitted:
		if v.q == q {
			return admission{ctx: ctx, inside: true}, nil
		}
	}
	if nc != nil && nc.holds(q) {
		return admission{ctx: ctx, inside: true}, nil
	}

	var w *waiter
	if nc != nil && cc == nil {
		w = q.takeTurn(&nc.turn)
	} else {
		w = q.takeTurn(nil) // a clean-up's turn is its arrival
	}
	if w == nil && nc != nil && time.Since(nc.start) < queueSlack {
		nc.hold(q)
		if nc.linger {
			nc.slotTaken(q)
		}
		return admission{ctx: ctx, held: nc}, nil
	}

	now := time.Now()
	switch {
	case cc != nil:
		if w != nil {
			cc.nc.queuedOn(q, 1)
			err := q.wait(w, nil, nil, nil, now, cc.until)
			cc.nc.queuedOn(q, -1)
			if err != nil {
				return admission{}, err
			}
		}
		now = time.Now()
		cctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), earliest(now.Add(nc.timeout), cc.until.Add(nc.timeout)))
		return admission{ctx: &admitted{Context: cctx, q: q}, cancel: cancel}, nil
	case nc != nil:
		if w != nil {
			var overdue <-chan struct{}
			if nc.linger {
				// An acquisition's call: stuck behind calls that wait for
				// replies long overdue, it gives up (ErrOverdue).
				overdue = q.overdueChan()
			}
			if err := q.wait(w, nc.parent, nc.unwanted, overdue, nc.start, nc.queueBy); err != nil {
				return admission{}, err
			}
		}
		if nc.linger {
			// Its deadline is the wait for its reply, whenever it was sent.
			nc.hold(q)
			nc.slotTaken(q)
			return admission{ctx: ctx, held: nc}, nil
		}
		now = time.Now()
		cctx, cancel := context.WithDeadline(nc.parent, earliest(now.Add(nc.timeout), nc.end))
		return admission{ctx: &admitted{Context: cctx, q: q}, cancel: cancel}, nil
	default:
		if w != nil {
			if err := q.wait(w, ctx, nil, nil, now, time.Time{}); err != nil {
				return admission{}, err
			}
		}
		return admission{ctx: &admitted{Context: ctx, q: q}}, nil
	}
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// wait blocks until w is given a slot, by passes (zero: never), unwanted or
// overdue is closed, ctx ends (nil: never), or the queue is stopped.
func (q *Queue) wait(w *waiter, ctx context.Context, unwanted, overdue <-chan struct{}, from, by time.Time) error {
	var (
		done  <-chan struct{}
		timer <-chan time.Time
	)
	if ctx != nil {
		done = ctx.Done()
	}
	if !by.IsZero() {
		t := time.NewTimer(time.Until(by))
		defer t.Stop()
		timer = t.C
	}
	var err error
	select {
	case <-w.ready:
		return nil
	case <-done:
		err = ctx.Err()
	case <-unwanted:
		err = errUnwanted
	case <-overdue:
		err = ErrOverdue
	case <-q.stopped:
		err = q.stopErr
	case <-timer:
		err = fmt.Errorf("%w: no free connection to the node within %v of the call's start (this client runs at most %d commands at once on one node, its connection pool's size): %w",
			ErrNotSent, by.Sub(from).Round(time.Microsecond), q.size, context.DeadlineExceeded)
	}
	q.leave(w)
	return err
}

// ErrNotSent is wrapped by the error of every node call that was never
// written to its node (not admitted by the node's queue, or shed by
// Engine.EnterAcquire): the node needs no clean-up for it.
var ErrNotSent = errors.New("redlock: not sent")

// ErrOverdue is what an acquisition's call returns that was still waiting
// for a slot when every slot of its node came to be held by a call waiting
// for a reply past the per-node timeout (Queue.stale): the node is not
// answering, and the call could only wait behind them until one of them
// ends (at its read deadline, seconds later). It was never sent.
var ErrOverdue = fmt.Errorf("%w: every connection to the node waits for a reply past the per-node timeout: %w", ErrNotSent, context.DeadlineExceeded)

// errUnwanted is what a call returns that was still waiting for its turn
// when the operation that made it no longer needed it: it was never sent.
var errUnwanted = fmt.Errorf("%w: the vote was decided while the call waited for a free connection", ErrNotSent)

// nodeCall is the context of one vote's node calls on nodes with a queue,
// and the vote's place in the nodes' queues. It ends (Done) at the per-node
// timeout from the vote's start, with its parent, or when cancelled; its
// expired channel, which bounds the vote's wait for answers, ends a per-node
// timeout after queueBy, the latest time a call may still get its slot (or
// with the parent, or when cancelled). One timer serves both instants: it
// fires at the first, then again at the other. A lingering vote's calls
// (linger) wait for their reply until a deadline of their own, later than
// the end, and the parent ends only the vote's wait (expired) and the calls'
// wait for their turn.
//
// It is a context of its own rather than two nested context.WithDeadline:
// those cost a dozen allocations per vote (two timers, a child registry,
// two done channels), and the C1 benchmark's votes made a third of its
// allocations (a memory profile of bench/'s case C1).
type nodeCall struct {
	parent     context.Context // values, and the end of the vote's calls
	parentDone <-chan struct{} // parent.Done(); nil when the parent never ends
	start      time.Time
	deadline   time.Time // start + timeout, or the parent's deadline if sooner
	queueBy    time.Time
	end        time.Time // queueBy + timeout (or the parent's deadline): expired
	linger     bool      // deadline is the calls' own: see lingering votes in quorum.go
	timeout    time.Duration
	unwanted   <-chan struct{} // see withQueueBy
	turn       turn            // the calls' place in the nodes' queues

	mu         sync.Mutex
	done       chan struct{}
	expired    chan struct{}
	err        error // set when done is closed
	over       bool  // expired is closed
	timer      *time.Timer
	stopParent func() bool // undoes the context.AfterFunc on the parent

	// held lists the queues on which a command of this vote holds a slot
	// while running on this context (admit's fast path): commands that
	// go-redis sends within it (HELLO) must not take a second slot.
	held    []*Queue
	heldBuf [8]*Queue

	// cleanup is this vote's clean-up context, handed to every node call
	// of the vote that asks for one (see cleanupContext).
	cleanup cleanupCall

	lv *lingerVote // a lingering vote's calls; nil for other votes

	// queued lists the queues on which a clean-up call of this vote waits
	// for its turn (WaitsForTurn), once per call.
	queued []*Queue
}

// queuedOn records that a clean-up call of this vote waits for q's turn
// (delta 1), or no longer does (-1).
func (nc *nodeCall) queuedOn(q *Queue, delta int) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if delta > 0 {
		nc.queued = append(nc.queued, q)
		return
	}
	if i := slices.Index(nc.queued, q); i >= 0 {
		nc.queued = slices.Delete(nc.queued, i, i+1)
	}
}

// WaitsForTurn reports whether a clean-up call (CleanupContext) of the vote
// whose node context is ctx still waits for n's turn in n's queue: it has
// not been sent. False on nodes without a queue.
func WaitsForTurn(ctx context.Context, n *Node) bool {
	nc, ok := ctx.(*nodeCall)
	if !ok || n.Queue == nil {
		return false
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return slices.Contains(nc.queued, n.Queue)
}

// lingerVote is what a lingering vote's nodeCall knows of each of its calls:
// when it got its node's slot, and whether it has returned. The vote waits
// for a call until a per-node timeout after its slot (or until the end), not
// for its reply. A call past that and still running is stale: it counts in
// its node's queue (Queue.stale) until it returns.
type lingerVote struct {
	calls int // the calls the vote makes, one per node
	recs  []lingerRec
}

type lingerRec struct {
	q               *Queue
	slot            time.Time // zero until the call has a slot
	returned, stale bool
}

// rec returns q's call's record, made on first use.
func (lv *lingerVote) rec(q *Queue) *lingerRec {
	for i := range lv.recs {
		if lv.recs[i].q == q {
			return &lv.recs[i]
		}
	}
	lv.recs = append(lv.recs, lingerRec{q: q})
	return &lv.recs[len(lv.recs)-1]
}

// slotTaken records that the vote's call on q has its slot now.
func (nc *nodeCall) slotTaken(q *Queue) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if r := nc.lv.rec(q); r.slot.IsZero() {
		r.slot = time.Now()
		nc.rearm(r.slot)
	}
}

// callReturned records that the vote's call on q has returned.
func (nc *nodeCall) callReturned(q *Queue) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	r := nc.lv.rec(q)
	r.returned = true
	if r.stale {
		r.stale = false
		q.addStale(-1)
	}
	nc.checkCalls(time.Now())
}

// checkCalls marks the calls past a per-node timeout from their slot stale,
// and closes expired once every call has returned or is stale. nc.mu is
// held.
func (nc *nodeCall) checkCalls(now time.Time) {
	done := 0
	for i := range nc.lv.recs {
		r := &nc.lv.recs[i]
		if !r.returned && !r.stale && !r.slot.IsZero() && !now.Before(r.slot.Add(nc.timeout)) {
			r.stale = true
			r.q.addStale(1)
		}
		if r.returned || r.stale {
			done++
		}
	}
	if !nc.over && done == nc.lv.calls {
		nc.over = true
		close(nc.expired)
	}
}

// rearm sets the timer for the next instant nc waits for. nc.mu is held.
func (nc *nodeCall) rearm(now time.Time) {
	var next time.Time
	at := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if nc.err == nil {
		at(nc.deadline)
	}
	if !nc.over {
		at(nc.end)
	}
	if nc.lv != nil {
		for _, r := range nc.lv.recs {
			if !r.returned && !r.stale && !r.slot.IsZero() {
				at(r.slot.Add(nc.timeout))
			}
		}
	}
	if !next.IsZero() && nc.timer != nil {
		nc.timer.Reset(next.Sub(now))
	}
}

// init starts nc's clock. Its channels are closed at once if the parent has
// already ended or the deadline has passed. A non-zero linger is the
// deadline of a lingering vote's calls (nc.linger), which are one per node
// of calls nodes.
func (nc *nodeCall) init(ctx context.Context, start, by time.Time, timeout time.Duration, unwanted <-chan struct{}, t turn, linger time.Time, calls int) {
	nc.parent, nc.parentDone = ctx, ctx.Done()
	nc.start, nc.queueBy, nc.timeout, nc.unwanted, nc.turn = start, by, timeout, unwanted, t
	nc.deadline, nc.end = start.Add(timeout), by.Add(timeout)
	if d, ok := ctx.Deadline(); ok {
		nc.deadline, nc.end = earliest(nc.deadline, d), earliest(nc.end, d)
	}
	if !linger.IsZero() {
		nc.linger, nc.deadline = true, linger
		nc.lv = &lingerVote{calls: calls, recs: make([]lingerRec, 0, calls)}
	}
	nc.done, nc.expired = make(chan struct{}), make(chan struct{})
	if err := ctx.Err(); err != nil {
		if nc.linger {
			nc.expire() // no call is sent (the queue's wait ends with ctx)
		} else {
			nc.stop(err)
			return
		}
	}
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.parentDone != nil && !nc.over {
		nc.stopParent = context.AfterFunc(ctx, nc.parentEnded)
	}
	nc.timer = time.AfterFunc(time.Until(earliest(nc.deadline, nc.end)), nc.tick)
}

// tick closes done once the deadline has passed and expired once the end
// has, and sets the timer for whichever is next.
func (nc *nodeCall) tick() {
	nc.mu.Lock()
	now := time.Now()
	if nc.err == nil && !now.Before(nc.deadline) {
		nc.err = context.DeadlineExceeded
		close(nc.done)
	}
	if !nc.over && !now.Before(nc.end) {
		nc.over = true
		close(nc.expired)
	}
	if nc.lv != nil {
		nc.checkCalls(now)
	}
	nc.rearm(now)
	over, stopParent := nc.over, nc.stopParent
	nc.mu.Unlock()
	if over && stopParent != nil {
		stopParent()
	}
}

// expire closes the expired channel only: the parent of a lingering vote
// ended.
func (nc *nodeCall) expire() {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if !nc.over {
		nc.over = true
		close(nc.expired)
	}
}

// stop ends nc with err (unless it has ended already) and its expired
// channel, and stops its clock.
func (nc *nodeCall) stop(err error) {
	nc.mu.Lock()
	if nc.err == nil {
		nc.err = err
		close(nc.done)
	}
	if !nc.over {
		nc.over = true
		close(nc.expired)
	}
	timer, stopParent := nc.timer, nc.stopParent
	nc.mu.Unlock()
	if timer != nil {
		timer.Stop()
	}
	if stopParent != nil {
		stopParent()
	}
}

func (nc *nodeCall) cancel() { nc.stop(context.Canceled) }

func (nc *nodeCall) parentEnded() {
	if nc.linger {
		nc.expire()
		return
	}
	nc.stop(nc.parent.Err())
}

// Deadline implements context.Context.
func (nc *nodeCall) Deadline() (time.Time, bool) { return nc.deadline, true }

// Done implements context.Context.
func (nc *nodeCall) Done() <-chan struct{} { return nc.done }

// Err implements context.Context.
func (nc *nodeCall) Err() error {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	return nc.err
}

// Value implements context.Context: the parent's values.
func (nc *nodeCall) Value(key any) any {
	if key == (callKey{}) {
		return nc
	}
	return nc.parent.Value(key)
}

func (nc *nodeCall) String() string { return "nodecall.voteCall" }

// hold records that a command of this vote holds a slot of q.
func (nc *nodeCall) hold(q *Queue) {
	nc.mu.Lock()
	if nc.held == nil {
		nc.held = nc.heldBuf[:0]
	}
	nc.held = append(nc.held, q)
	nc.mu.Unlock()
}

// unhold undoes one hold(q).
func (nc *nodeCall) unhold(q *Queue) {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for i, h := range nc.held {
		if h == q {
			last := len(nc.held) - 1
			nc.held[i], nc.held[last] = nc.held[last], nil
			nc.held = nc.held[:last]
			return
		}
	}
}

// holds reports whether a command of this vote holds a slot of q.
func (nc *nodeCall) holds(q *Queue) bool {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, h := range nc.held {
		if h == q {
			return true
		}
	}
	return false
}

// cleanupCall is the context of a clean-up call made by a node call of the
// vote nc: nc's values, deadline and end (a parent that never ends, so no
// cancellation from the caller), and on a node with a queue, a wait for the
// node's turn until until (see cleanupContext).
type cleanupCall struct {
	nc    *nodeCall
	until time.Time
}

func (cc *cleanupCall) Deadline() (time.Time, bool) { return cc.nc.Deadline() }
func (cc *cleanupCall) Done() <-chan struct{}       { return cc.nc.Done() }
func (cc *cleanupCall) Err() error                  { return cc.nc.Err() }
func (cc *cleanupCall) String() string              { return "nodecall.cleanupCall" }

func (cc *cleanupCall) Value(key any) any {
	if key == (callKey{}) {
		return cc
	}
	return cc.nc.Value(key)
}

type queueByKey struct{}

// queueBy carries how long a vote's node calls may wait for their turn (see
// withQueueBy).
type queueBy struct {
	context.Context
	by       time.Time
	unwanted <-chan struct{}
	turn     turn // taken when the queueBy is made: see withQueueBy

	// first is the nodeCall of the first vote made with it, allocated
	// with it: most attempts make one vote.
	taken atomic.Bool
	first nodeCall
}

func (q *queueBy) Value(key any) any {
	if key == (queueByKey{}) {
		return q
	}
	return q.Context.Value(key)
}

// withQueueBy lets the votes made with ctx wait for a node's turn until by
// (default: one per-node timeout from the vote's start), and not at all once
// unwanted is closed (nil: never): a call still waiting then is not sent,
// and its vote receives errUnwanted. It returns ctx as it is when the nodes
// have no queue. Those votes share one turn in the nodes' queues, taken now:
// an attempt's later votes (a write-back) keep the attempt's place.
func (e *Engine) WithQueueBy(ctx context.Context, by time.Time, unwanted <-chan struct{}) context.Context {
	if !e.Queued {
		return ctx
	}
	return &queueBy{Context: ctx, by: by, unwanted: unwanted, turn: nextTurn(time.Now())}
}

// nodeContext returns the context of one vote's node calls, which ends at
// the per-node timeout, and the channel that ends the vote's wait for the
// nodes that have not answered: the same context's Done, or on nodes with a
// queue, a per-node timeout after the last moment a call may get its slot.
// Both also end with ctx. cancel releases them.
func (e *Engine) NodeContext(ctx context.Context, timeout time.Duration) (nodeCtx context.Context, expired <-chan struct{}, cancel context.CancelFunc) {
	return e.lingerContext(ctx, timeout, time.Time{})
}

// lingerReturned tells a lingering vote's context on nodes with a queue that
// the vote's call to n has returned (see lingerVote).
func lingerReturned(ctx context.Context, n *Node) {
	if nc, ok := ctx.(*nodeCall); ok && nc.lv != nil && n.Queue != nil {
		nc.callReturned(n.Queue)
	}
}

// lingerContext is nodeContext for a lingering vote when linger is not zero:
// the calls' context then ends at linger (or when cancelled), not at the
// per-node timeout nor with ctx, which end only the vote's wait (expired)
// and, on nodes with a queue, the calls' wait for their turn (there the vote
// waits for each call a per-node timeout from its slot: lingerVote).
func (e *Engine) lingerContext(ctx context.Context, timeout time.Duration, linger time.Time) (nodeCtx context.Context, expired <-chan struct{}, cancel context.CancelFunc) {
	if !e.Queued {
		if linger.IsZero() {
			nodeCtx, cancel = context.WithTimeout(ctx, timeout)
			return nodeCtx, nodeCtx.Done(), cancel
		}
		callCtx, cancelCalls := context.WithDeadline(context.WithoutCancel(ctx), linger)
		voteCtx, cancelVote := context.WithTimeout(ctx, timeout)
		return callCtx, voteCtx.Done(), func() { cancelVote(); cancelCalls() }
	}
	start := time.Now()
	by, unwanted, t := start.Add(timeout), (<-chan struct{})(nil), turn{}
	q, ok := ctx.(*queueBy) // as the votes pass it: no walk up the values
	if !ok {
		q, ok = ctx.Value(queueByKey{}).(*queueBy)
	}
	var nc *nodeCall
	if ok {
		by, unwanted, t = q.by, q.unwanted, q.turn
		if q.taken.CompareAndSwap(false, true) {
			nc = &q.first
		}
	} else {
		t = nextTurn(start)
	}
	if nc == nil {
		nc = new(nodeCall)
	}
	if by.Before(start) {
		by = start // the budget is spent: a slot now or never
	}
	nc.init(ctx, start, by, timeout, unwanted, t, linger, len(e.Nodes))
	return nc, nc.expired, nc.cancel
}

// noCancel is the CancelFunc of a context that needs none.
func noCancel() {}

// cleanupContext returns the context of one clean-up call (a delete) to a
// node, with ctx's values but not its cancellation. On nodes with a queue it
// may wait for its turn until until, the moment the key it deletes expires
// anyway (waiting longer would save nothing, and giving up sooner would leave
// the key until then), and then has the per-node timeout; elsewhere it has
// the per-node timeout from now. Such calls run in the background, tracked by
// the Client, so Close waits for them.
//
// Called by a vote's node call whose vote cannot be cancelled (the vote of a
// release), it returns the vote's own cleanupCall: a call that finds its
// slot free at once then runs on the vote's deadline, which is its own
// within queueSlack, and nothing is allocated.
func (e *Engine) CleanupContext(ctx context.Context, until time.Time, timeout time.Duration) (context.Context, context.CancelFunc) {
	if nc, ok := ctx.(*nodeCall); ok && e.Queued && nc.parentDone == nil && nc.timeout == timeout && nc.deadline.Equal(nc.start.Add(timeout)) {
		nc.mu.Lock()
		if nc.cleanup.nc == nil {
			nc.cleanup = cleanupCall{nc: nc, until: until}
		}
		same := nc.cleanup.until.Equal(until)
		nc.mu.Unlock()
		if same {
			return &nc.cleanup, noCancel
		}
	}
	nctx, _, cancel := e.NodeContext(e.WithQueueBy(context.WithoutCancel(ctx), until, nil), timeout)
	return nctx, cancel
}
