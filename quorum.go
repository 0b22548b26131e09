package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/nodecall"
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

// reply is what a node call returns before it becomes a NodeResult
// (nodecall.Reply: Code is codeApplied... when Err is nil, Epoch
// epochTrusted...).
type reply = nodecall.Reply

// node is one Redis master (nodecall.Node).
type node = nodecall.Node

// nodeOp runs one operation against one node with the given context.
type nodeOp = nodecall.Op

// tally is the state of one vote: every node's result so far, and the
// fencing counters and epoch states reported by granting nodes.
type tally struct {
	results  []NodeResult
	counters []uint64
	epochs   []uint64 // epochTrusted...; uint64 to share the counters' allocation
	granted  int
	// fresh counts quarantined grants from nodes that created the key's
	// epoch just now; others counts every other answer (errors aside), and
	// taken those of them that said "taken"; failed the nodes unreachable,
	// timed out or answering an error. freshOK counts the grants on epochs
	// created just now that count at once: their node's incarnation is
	// verified and old (incarnation.go), so the epoch is new indeed.
	// blind counts the grants of nodes quarantined as a whole
	// (epochNodeQuarantined): such a node may have lost its data, so its
	// answer tells nothing of the key's history, neither new nor old: for
	// the first-use rule it is as a node that did not answer.
	fresh, freshOK, others, taken, failed, blind int
	need                                         int
	rule                                         voteRule
}

// brandNew reports whether the key is new to the cluster: at least a
// majority of nodes answered, every answer said the key's epoch was created
// just now, and no node reported any history (an epoch, or the key taken).
// Only unreachable nodes could then hold history, and they are a minority,
// while a key's history is on at least a majority (every node that ever
// granted it). So unless a majority of the nodes that hold it lost their data
// or are unreachable at once, the key has never been locked.
func (t *tally) brandNew() bool { return t.others == 0 && t.fresh+t.freshOK >= t.need }

// voteRule is what decides a vote besides its replies (tally.decided).
type voteRule int

const (
	// decideAtQuorum: the quorum was reached, or can no longer be.
	decideAtQuorum voteRule = iota
	// decideWhy is decideAtQuorum for an acquisition: a lost vote is
	// decided only once it also tells why (QuorumError tells ErrTaken from
	// ErrNoQuorum by that).
	decideWhy
	// decideAll: every node answered (or timed out).
	decideAll
)

// ballot is one vote, in one allocation: the engine's state of its node
// calls, and the tally it fills.
type ballot struct {
	nodecall.Ballot
	tally
}

// startVote makes the ballot of a vote decided by rule at need votes, and
// starts its node calls (nodecall.Engine.Start).
func (c *Client) startVote(ctx context.Context, rule voteRule, need int, v nodecall.Vote) *ballot {
	n := len(c.nodes)
	b := &ballot{}
	t := &b.tally
	both := make([]uint64, 2*n) // counters and epochs, in one allocation
	t.results, t.counters, t.epochs, t.need, t.rule = make([]NodeResult, n), both[:n:n], both[n:], need, rule
	for i, nd := range c.nodes {
		t.results[i] = NodeResult{Node: nd.Name, Outcome: OutcomePending}
	}
	c.eng.Start(ctx, &b.Ballot, t, v)
	return b
}

// splitFirstUse reports whether the vote is a first use that other keys
// split: a majority of the nodes granted on epochs created just now, and
// every other answer was "taken" (a key of another owner: another client's
// first use of the key, or a holder). The attempt then asks the nodes that
// said "taken" again (acquisition.reask): if their keys were another
// attempt's, that attempt has failed and taken them back.
func (t *tally) splitFirstUse() bool {
	return t.fresh+t.freshOK >= t.need && t.taken > 0 && t.others == t.taken
}

// replay returns node i's answer in t as a reply, for a vote that asks
// some nodes again and keeps the others' answers (acquisition.revote).
func (t *tally) replay(i int) reply {
	res := t.results[i]
	r := reply{Counter: t.counters[i], Epoch: int64(t.epochs[i]), Left: res.QuarantineLeft, Err: res.Err}
	switch res.Outcome {
	case OutcomePending:
		r.Err, r.Shed = errShed, true
	case OutcomeGranted:
		r.Code = codeApplied
	case OutcomeQuarantined:
		r.Code = codeQuarantined
	case OutcomeTaken:
		r.Code = codeTaken
	case OutcomeNotHeld:
		r.Code = codeNotHeld
	}
	return r
}

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
// has run. The client's Tracker also counts them, so Close waits for them
// too. A channel, not a function: a caller that makes many votes keeps only
// those not yet done, and nothing of a finished vote stays reachable.
func (c *Client) voteQuorum(ctx context.Context, timeout time.Duration, op nodeOp, late func(reply)) (*tally, <-chan struct{}) {
	b := c.startVote(ctx, decideAtQuorum, c.quorum, nodecall.Vote{Timeout: timeout, Op: op, Late: late})
	return &b.tally, b.Count(ctx)
}

// voteQuorumKeep is voteQuorum handing the replies that arrive after the
// decision over on the returned channel (one per node at most, so none is
// ever blocked), for a caller that goes on counting them: no callback and
// no channel of its own to allocate.
// It also returns the context the node calls run on (nodecall.WaitsForTurn).
func (c *Client) voteQuorumKeep(ctx context.Context, timeout time.Duration, op nodeOp) (*tally, <-chan reply, context.Context) {
	b := c.startVote(ctx, decideAtQuorum, c.quorum, nodecall.Vote{Timeout: timeout, Op: op, KeepLate: true})
	b.Count(ctx)
	return &b.tally, b.Replies(), b.Context()
}

// voteAcquire is voteQuorum for an acquisition attempt, whose calls create
// keys: each node call waits for its node's reply until linger, however the
// vote went, so that a grant whose reply comes after the vote was decided
// (or after ctx ended) still reaches late, which can then take it back; and
// a vote that cannot be won is decided only once it also tells why
// (decideWhy). The returned channel is closed once every call has returned
// or outlived the vote's wait for it (the per-node timeout, or ctx's end);
// Close stops the calls still waiting at its bound.
func (c *Client) voteAcquire(ctx context.Context, timeout time.Duration, linger time.Time, op nodeOp, late func(reply)) (*tally, <-chan struct{}) {
	b := c.startVote(ctx, decideWhy, c.quorum, nodecall.Vote{Timeout: timeout, Op: op, Late: late, Linger: linger})
	b.Count(ctx)
	return &b.tally, b.Expired()
}

// voteAll is voteQuorum waiting for every node's answer, up to the
// per-node timeout, for the operations that want every node (a failed
// acquisition's clean-up, putting keys back after an extension).
func (c *Client) voteAll(ctx context.Context, timeout time.Duration, op nodeOp) (*tally, <-chan struct{}) {
	b := c.startVote(ctx, decideAll, len(c.nodes), nodecall.Vote{Timeout: timeout, Op: op})
	return &b.tally, b.Count(ctx)
}

// Record counts one node's reply (nodecall.Counter; a shed call's reply is
// not one: the engine leaves the node pending).
func (t *tally) Record(ctx context.Context, r reply) {
	res := &t.results[r.Idx]
	res.Outcome, res.Err, res.Latency = classify(r), r.Err, r.Latency
	if res.Outcome == OutcomeTimedOut {
		// The caller's deadline cuts a node call short just as the
		// per-node timeout would: say whose deadline it was.
		if cause := callerEnded(ctx); cause != nil {
			res.Outcome, res.Err = OutcomeCanceled, fmt.Errorf("%w: %w", cause, r.Err)
		}
	}
	t.counters[r.Idx], t.epochs[r.Idx] = r.Counter, uint64(r.Epoch)
	switch res.Outcome {
	case OutcomeGranted:
		t.granted++
	case OutcomeQuarantined:
		res.QuarantineLeft = r.Left
	}
	switch {
	case r.Err != nil:
		if res.Outcome != OutcomeCanceled {
			t.failed++
		}
	case res.Outcome == OutcomeQuarantined && r.Epoch == epochNodeQuarantined:
		t.blind++
	case res.Outcome == OutcomeQuarantined && r.Epoch == epochNew:
		t.fresh++
	case res.Outcome == OutcomeGranted && r.Epoch == epochNew:
		t.freshOK++
	default:
		t.others++
		if res.Outcome == OutcomeTaken {
			t.taken++
		}
	}
}

// Decided reports whether the answers so far, answered of them in all,
// decide the vote (nodecall.Counter): every node answered, or (voteQuorum)
// the quorum was reached or can no longer be.
func (t *tally) Decided(answered int) bool {
	n := len(t.results)
	if t.rule == decideAll {
		return answered == n
	}
	// While every answer so far is a fresh epoch or "taken", the key may
	// be brand new (the keys taken may be other first uses' that are taken
	// back, see splitFirstUse): that needs every node's answer (or its
	// timeout), since one late node with history decides it is not.
	possible := t.granted + (n - answered)
	if t.others == t.taken {
		possible += t.fresh
	}
	if t.granted >= t.need || answered == n {
		return true
	}
	if possible >= t.need {
		return false
	}
	// Lost. With why, only once a majority answered (the nodes' refusals
	// decided it) or the nodes that failed are too many for one to answer
	// (an outage): QuorumError tells ErrTaken from ErrNoQuorum by that.
	return t.rule != decideWhy || t.fresh+t.freshOK+t.others+t.blind >= t.need || t.failed > n-t.need
}

// Unanswered marks the nodes that had not answered when the clock or the
// caller decided the vote (nodecall.Counter): timed out, or canceled when
// the caller's context ended. A node the call was never sent to (shed)
// stays pending.
func (t *tally) Unanswered(ctx context.Context, shed []bool) {
	pending, cause := OutcomeTimedOut, error(context.DeadlineExceeded)
	if err := callerEnded(ctx); err != nil {
		pending, cause = OutcomeCanceled, err
	}
	for i := range t.results {
		if t.results[i].Outcome == OutcomePending && (shed == nil || !shed[i]) {
			t.results[i].Outcome, t.results[i].Err = pending, cause
		}
	}
}

// callerEnded returns the caller's context error, or DeadlineExceeded once
// its deadline has passed (nodecall.CallerEnded).
func callerEnded(ctx context.Context) error { return nodecall.CallerEnded(ctx) }

// classify turns a node reply into an Outcome.
func classify(r reply) Outcome {
	if r.Err == nil {
		switch r.Code {
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
	case errors.Is(r.Err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(r.Err, context.DeadlineExceeded), errors.As(r.Err, &netErr) && netErr.Timeout():
		return OutcomeTimedOut
	}
	var redisErr redis.Error
	if errors.As(r.Err, &redisErr) {
		return OutcomeError
	}
	return OutcomeUnreachable
}
