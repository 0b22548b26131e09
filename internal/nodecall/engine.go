// Package nodecall is the node-call engine of the redlock package: it sends
// one operation to every node of a client at once and hands the replies to a
// counter of the caller's (Engine.Start, Ballot.Count), queues the commands
// of the nodes the client dialed itself so that a per-node timeout measures
// the node (Queue), sheds the calls a lagging node could only queue
// (Engine.EnterAcquire), boxes a script call once for every node
// (ScriptCall), and tracks the calls in flight that closing the client waits
// for (Tracker).
//
// What the replies mean (the quorum, the outcomes, the amnesia guard's
// rules) is the redlock package's: this package only runs the calls.
package nodecall

import (
	"context"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// Engine runs the node calls of one client.
type Engine struct {
	// Nodes are the client's nodes, in order.
	Nodes []*Node
	// Quorum is how many nodes decide a vote: EnterAcquire sheds a call
	// only while that many nodes keep up.
	Quorum int
	// Queued: every node has a Queue (the client dialed them).
	Queued bool
	// Tracker counts the calls in flight.
	Tracker
	// Answered, when not nil, is told every node call's reply as the call
	// returns (after its vote, for a straggler), with the context the
	// vote's caller started it with: the redlock package's health view. It
	// runs in the call's goroutine and must be cheap.
	Answered func(caller context.Context, r Reply)
}

// Node is one Redis master of a client.
type Node struct {
	Idx    int // its index in Engine.Nodes
	Name   string
	Client redis.Scripter
	Closer func() error // nil for clients the user owns
	Queue  *Queue       // nil for clients the user owns
	// NoResend: the node's client never sends a command twice (go-redis
	// MaxRetries -1), so a "taken" reply is the answer to the attempt's
	// only SET there: nothing to delete.
	NoResend bool

	// backlog counts the client's acquire and release calls to the node
	// still running; late counts those of them that outlived the vote
	// they were sent for (stragglers, and the deletes that follow them).
	// An acquisition may send the node nothing while late is at its
	// connection pool's size (lateLimit, 0: no limit). See EnterAcquire.
	backlog, late atomic.Int32
	lateLimit     int32
}

// LimitBacklog sets the node's limit from its client's connection pool,
// when the client says how large that is, and whether it never re-sends a
// command (NoResend).
func (n *Node) LimitBacklog(rc any) {
	if c, ok := rc.(*redis.Client); ok {
		if c.Options().PoolSize > 0 {
			n.lateLimit = int32(c.Options().PoolSize)
		}
		n.NoResend = c.Options().MaxRetries <= 0 // Options() reports -1 (no retries) as 0
	}
}

// EnterAcquire counts one more acquire call to node n, which n.Exit ends;
// it returns false (and counts nothing) when n must not be sent it: n lags
// behind the nodes that decide the votes, with as many calls still running
// after their votes were decided (late) as its pool has connections, while
// a majority of the nodes keep up (fewer calls running than their pool has
// connections).
//
// Why: a node that answers more slowly than the others is never waited
// for, so nothing paces the calls sent to it, and go-redis queues those
// that find every pooled connection busy. In that queue a release's delete
// can run out of time before it is even written, leaving the key until its
// TTL (seen in bench/'s slow-node case, C2). An acquisition not
// sent to a node needs no delete there, and the node is not needed for the
// majority; deletes are never shed (Enter). When every node is that busy (a
// burst of acquisitions), nothing is shed: the client's own queue is the
// limit then, and the per-node timeout applies as before. Apart from that,
// on the nodes with a Queue, an acquisition is not sent while every
// connection of the node waits for a reply past the per-node timeout
// (Queue.stale): it could only wait behind them. A call that entered
// before that and still waits for a connection gives up when it happens
// (ErrOverdue).
func (e *Engine) EnterAcquire(n *Node) bool {
	if n.lateLimit > 0 && n.late.Load() >= n.lateLimit && e.majorityKeepsUp() {
		return false
	}
	if n.Queue != nil && int(n.Queue.stale.Load()) >= n.Queue.size {
		return false // every connection waits for a reply long overdue
	}
	n.backlog.Add(1)
	return true
}

// Enter counts one more call to node n that is never shed (a delete), which
// n.Exit ends.
func (n *Node) Enter() { n.backlog.Add(1) }

// Exit ends a call that Enter or EnterAcquire counted (a method, not a
// closure: no allocation per call).
func (n *Node) Exit() { n.backlog.Add(-1) }

// AddLate adds delta to the count of n's calls that outlived their vote.
func (n *Node) AddLate(delta int32) { n.late.Add(delta) }

// majorityKeepsUp reports whether a quorum of the nodes have fewer calls
// running than their pool has connections (a node without a known pool
// does not count).
func (e *Engine) majorityKeepsUp() bool {
	k := 0
	for _, m := range e.Nodes {
		if m.lateLimit > 0 && m.backlog.Load() < m.lateLimit {
			k++
		}
	}
	return k >= e.Quorum
}
