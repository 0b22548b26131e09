package redlock

// The errors the package returns: a few sentinels, and QuorumError, which
// carries every node's outcome.

import (
	"errors"
	"fmt"
	"strings"
)

// Errors returned by the package. Test them with errors.Is; a *QuorumError
// (errors.As) carries the per-node outcomes behind ErrNotAcquired, ErrNotHeld,
// ErrNoQuorum and ErrTaken.
var (
	// ErrInvalidArgument reports bad input: no nodes, a nil or duplicate
	// client, a malformed URL, an empty key or one longer than MaxKeyLen
	// (errors and logs show a long key as a short prefix and its length), a
	// TTL too short to leave validity after the drift allowance and one
	// per-node timeout (the error names the smallest usable TTL), a negative
	// factor or timeout, a nil function or pointer given to an option.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrNotAcquired means Acquire gave up: another owner holds the key on too
	// many nodes, too few nodes answered, the validity time ran out during the
	// acquisition, the context ended, or too many nodes answer with an error
	// that retrying cannot fix (a wrong password: see Client.Acquire).
	ErrNotAcquired = errors.New("redlock: lock not acquired")
	// ErrNotHeld means Release or Extend found that this Lock is no longer
	// held: its validity ran out, or too many nodes report the key expired or
	// held by another owner.
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrNoQuorum means Release or Extend could not reach a majority of the
	// nodes, so the outcome is unknown. After a failed Extend the lock stays
	// valid until its previous deadline; after a failed Release the keys that
	// were not deleted expire at their TTL.
	ErrNoQuorum = errors.New("redlock: no quorum of nodes answered")
	// ErrClosed is returned by operations on a closed Client.
	ErrClosed = errors.New("redlock: client closed")
	// ErrTaken means a failed Acquire or TryAcquire met another holder: in
	// its last attempt at least one node had answered, by the time the vote
	// was decided, that another owner holds the key (OutcomeTaken; a node
	// still pending then does not count). errors.Is(err, ErrTaken) is true only for a
	// *QuorumError wrapping ErrNotAcquired, and tells "busy" from "too few
	// nodes answered" (no node said taken: unreachable, timed out, errors)
	// without reading the per-node outcomes. One such node is enough, even
	// when the others could not be reached: a client holds or contends for
	// the key, so waiting is the answer, not repairing nodes. How many nodes
	// said so is in the QuorumError's Nodes.
	ErrTaken = errors.New("redlock: lock held by another owner")
)

// QuorumError is the error of an operation that did not reach its quorum. It
// wraps one of ErrNotAcquired, ErrNotHeld or ErrNoQuorum and, when the
// caller's context ended, the context's error, so both
// errors.Is(err, ErrNotAcquired) and errors.Is(err, context.Canceled) hold.
type QuorumError struct {
	Op       Op           // OpAcquire, OpExtend or OpRelease
	Key      string       // the key as the caller named it (without prefix)
	Quorum   int          // votes needed: N/2+1
	Granted  int          // nodes on which the last attempt applied
	Attempts int          // attempts made (acquire only)
	Nodes    []NodeResult // each node's outcome in the last attempt, in node order
	Err      error        // ErrNotAcquired, ErrNotHeld or ErrNoQuorum
	Cause    error        // the context's error, or another reason; may be nil
}

// newQuorumError is the one way the package builds a QuorumError: op on key
// fell short of quorum in vote t (nil when nothing was sent), err is the
// sentinel and cause why, when known.
func newQuorumError(op Op, key string, quorum int, t *tally, err, cause error) *QuorumError {
	qe := &QuorumError{Op: op, Key: key, Quorum: quorum, Err: err, Cause: cause}
	if t != nil {
		qe.Granted, qe.Nodes = t.granted, t.results
	}
	return qe
}

// Error describes the failure and every node's outcome, without secrets.
func (e *QuorumError) Error() string {
	var b strings.Builder
	if len(e.Nodes) == 0 && e.Cause != nil {
		// Refused before any round trip (an Extend past the validity).
		fmt.Fprintf(&b, "%v: %s %s: %v; nothing sent", e.Err, e.Op, keyText(e.Key), e.Cause)
		return b.String()
	}
	fmt.Fprintf(&b, "%v: %s %s: applied on %d of %d nodes, %d needed", e.Err, e.Op, keyText(e.Key), e.Granted, len(e.Nodes), e.Quorum)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (attempt %d)", e.Attempts)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	b.WriteString(" [")
	for i, n := range e.Nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", n.Node, n.Outcome)
	}
	b.WriteString("]")
	return b.String()
}

// Is reports whether target is ErrTaken and e is a failed acquisition whose
// last attempt met another owner on some node (see ErrTaken). The sentinel
// and the cause are matched through Unwrap.
func (e *QuorumError) Is(target error) bool {
	if target != ErrTaken || e.Err != ErrNotAcquired {
		return false
	}
	for _, n := range e.Nodes {
		if n.Outcome == OutcomeTaken {
			return true
		}
	}
	return false
}

// Unwrap returns the sentinel and, if set, the cause.
func (e *QuorumError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}
