package redlock

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
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// queueSlack is how late after its vote's start a command may get its slot
// and still run on the vote's own deadline: less than this is goroutine
// start-up, not queueing, and saves a context per command.
const queueSlack = time.Millisecond

// nodeQueue admits at most size commands at once to one node: a go-redis
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
type nodeQueue struct {
	size    int
	mu      sync.Mutex
	busy    int     // slots taken; while a command waits, busy == size
	waiting waiters // a min-heap on turn
}

func newNodeQueue(size int) *nodeQueue {
	return &nodeQueue{size: max(size, 1)}
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
	i     int           // index in nodeQueue.waiting; -1 once out of it
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
func (q *nodeQueue) take(nc *nodeCall) *waiter {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.busy < q.size {
		q.busy++
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	if nc != nil {
		w.turn = nc.turn
	} else {
		w.turn = nextTurn(time.Now())
	}
	heap.Push(&q.waiting, w)
	return w
}

// free frees a slot: it goes to the first waiter, if any.
func (q *nodeQueue) free() {
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
func (q *nodeQueue) leave(w *waiter) {
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
func (q *nodeQueue) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

// ProcessHook implements redis.Hook: the command waits for a slot.
func (q *nodeQueue) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if ctx.Value(admittedKey{}) == q {
			return next(ctx, cmd) // see admitted
		}
		ctx, done, err := q.admit(ctx)
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		defer done()
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: a pipeline holds one
// connection, so it takes one slot.
func (q *nodeQueue) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if ctx.Value(admittedKey{}) == q {
			return next(ctx, cmds)
		}
		ctx, done, err := q.admit(ctx)
		if err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		defer done()
		return next(ctx, cmds)
	}
}

type admittedKey struct{}

// admitted is the context of a command that holds a slot of q. go-redis
// sends commands of its own within it through the same hooks (HELLO, and a
// pipeline, when it opens a connection for the command): they run on the
// command's connection and must not wait for a slot of their own, or a full
// queue of new connections would wait for itself until the deadline.
type admitted struct {
	context.Context
	q *nodeQueue
}

func (a *admitted) Value(key any) any {
	if key == (admittedKey{}) {
		return a.q
	}
	return a.Context.Value(key)
}

// admit waits for a slot and returns the context to run the command with
// and the function that frees the slot. In a vote (ctx is a *nodeCall) the
// wait ends at the vote's queue deadline, and a command that waited gets a
// whole per-node timeout from the moment it has its slot; any other command
// (a late grant's clean-up, for instance) waits within its own context.
func (q *nodeQueue) admit(ctx context.Context) (context.Context, func(), error) {
	nc, _ := ctx.Value(nodeCallKey{}).(*nodeCall)
	if w := q.take(nc); w != nil {
		if err := q.wait(ctx, nc, w); err != nil {
			return nil, nil, err
		}
		if nc == nil {
			return &admitted{Context: ctx, q: q}, q.free, nil
		}
	} else if nc == nil || time.Since(nc.start) < queueSlack {
		return &admitted{Context: ctx, q: q}, q.free, nil
	}
	cctx, cancel := context.WithTimeout(nc.outer, nc.timeout)
	return &admitted{Context: cctx, q: q}, func() { cancel(); q.free() }, nil
}

// wait blocks until w is given a slot, the vote's queue deadline passes, or
// the context ends.
func (q *nodeQueue) wait(ctx context.Context, nc *nodeCall, w *waiter) error {
	var err error
	if nc == nil {
		select {
		case <-w.ready:
			return nil
		case <-ctx.Done():
			err = ctx.Err()
		}
	} else {
		t := time.NewTimer(time.Until(nc.queueBy))
		defer t.Stop()
		select {
		case <-w.ready:
			return nil
		case <-nc.outer.Done():
			err = nc.outer.Err()
		case <-nc.unwanted:
			err = errUnwanted
		case <-t.C:
			err = fmt.Errorf("%w: no free connection to the node within %v of the call's start (this client runs at most %d commands at once on one node, its connection pool's size): %w",
				errNotSent, nc.queueBy.Sub(nc.start).Round(time.Microsecond), q.size, context.DeadlineExceeded)
		}
	}
	q.leave(w)
	return err
}

// errNotSent is wrapped by the error of every node call that was never
// written to its node (not admitted by the node's queue, or shed by
// Client.enter): the node needs no clean-up for it.
var errNotSent = errors.New("redlock: not sent")

// errUnwanted is what a call returns that was still waiting for its turn
// when the operation that made it no longer needed it: it was never sent.
var errUnwanted = fmt.Errorf("%w: the vote was decided while the call waited for a free connection", errNotSent)

type nodeCallKey struct{}

// nodeCall is the context of one vote's node calls on nodes with a queue.
// Itself it ends at the per-node timeout from the vote's start, or with the
// caller's context; outer ends a per-node timeout after queueBy, the latest
// time a call may still get its slot, and bounds every call of the vote.
type nodeCall struct {
	context.Context // start + timeout
	outer           context.Context
	start, queueBy  time.Time
	timeout         time.Duration
	unwanted        <-chan struct{} // see withQueueBy
	turn            turn            // the calls' place in the nodes' queues
}

func (nc *nodeCall) Value(key any) any {
	if key == (nodeCallKey{}) {
		return nc
	}
	return nc.Context.Value(key)
}

type queueByKey struct{}

// queueBy carries how long a vote's node calls may wait for their turn (see
// withQueueBy).
type queueBy struct {
	context.Context
	by       time.Time
	unwanted <-chan struct{}
	turn     turn // taken when the queueBy is made: see withQueueBy
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
func (c *Client) withQueueBy(ctx context.Context, by time.Time, unwanted <-chan struct{}) context.Context {
	if !c.queued {
		return ctx
	}
	return &queueBy{Context: ctx, by: by, unwanted: unwanted, turn: nextTurn(time.Now())}
}

// nodeContext returns the context of one vote's node calls, which ends at
// the per-node timeout, and the channel that ends the vote's wait for the
// nodes that have not answered: the same context's Done, or on nodes with a
// queue, a per-node timeout after the last moment a call may get its slot.
// Both also end with ctx. cancel releases them.
func (c *Client) nodeContext(ctx context.Context, timeout time.Duration) (nodeCtx context.Context, expired <-chan struct{}, cancel context.CancelFunc) {
	if !c.queued {
		nodeCtx, cancel = context.WithTimeout(ctx, timeout)
		return nodeCtx, nodeCtx.Done(), cancel
	}
	start := time.Now()
	by, unwanted, turn := start.Add(timeout), (<-chan struct{})(nil), turn{}
	if q, ok := ctx.Value(queueByKey{}).(*queueBy); ok {
		by, unwanted, turn = q.by, q.unwanted, q.turn
	} else {
		turn = nextTurn(start)
	}
	if by.Before(start) {
		by = start // the budget is spent: a slot now or never
	}
	outer, cancelOuter := context.WithDeadline(ctx, by.Add(timeout))
	inner, cancelInner := context.WithDeadline(outer, start.Add(timeout))
	cancel = func() { cancelInner(); cancelOuter() }
	return &nodeCall{Context: inner, outer: outer, start: start, queueBy: by, timeout: timeout, unwanted: unwanted, turn: turn}, outer.Done(), cancel
}

// cleanupContext returns the context of one clean-up call (a delete) to a
// node, with ctx's values but not its cancellation. On nodes with a queue it
// may wait for its turn until until, the moment the key it deletes expires
// anyway (waiting longer would save nothing, and giving up sooner would leave
// the key until then), and then has the per-node timeout; elsewhere it has
// the per-node timeout from now. Such calls run in the background, tracked by
// the Client, so Close waits for them.
func (c *Client) cleanupContext(ctx context.Context, until time.Time, timeout time.Duration) (context.Context, context.CancelFunc) {
	nctx, _, cancel := c.nodeContext(c.withQueueBy(context.WithoutCancel(ctx), until, nil), timeout)
	return nctx, cancel
}
