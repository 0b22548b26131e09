package redlock

// The errors the package returns: a few sentinels, and QuorumError, which
// carries every node's outcome.

import (
	"errors"
	"fmt"
	"slices"
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
	// factor or timeout, a nil function or pointer given to an option, a
	// nil context (every call that takes one refuses it before anything
	// else).
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrNotAcquired means Acquire gave up: another owner holds the key on too
	// many nodes (ErrTaken), too few nodes answered (ErrNoQuorum), the
	// validity time ran out during the acquisition, the context ended, or
	// too many nodes answer with an error that retrying cannot fix (a wrong
	// password: see Acquiring in the package doc).
	ErrNotAcquired = errors.New("redlock: lock not acquired")
	// ErrNotHeld means Release or Extend found that this Lock is no longer
	// held: its validity ran out, or too many nodes report the key expired or
	// held by another owner.
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrNoQuorum means too few nodes answered for a majority. From Release
	// or Extend the outcome is then unknown: after a failed Extend the lock
	// stays valid until its previous deadline; after a failed Release the
	// keys that were not deleted expire at their TTL. A failed Acquire or
	// TryAcquire matches it (as well as ErrNotAcquired) when in its last
	// attempt so many nodes were unreachable, timed out or answered an error
	// that the others were fewer than a majority, whatever those others
	// said: an outage, which Acquire waits out only up to its outage limit
	// (WithOutageLimit).
	ErrNoQuorum = errors.New("redlock: no quorum of nodes answered")
	// ErrClosed is returned by operations on a closed Client.
	ErrClosed = errors.New("redlock: client closed")
	// ErrTaken means a failed Acquire or TryAcquire met another holder: in
	// its last attempt at least one node answered that another owner holds
	// the key (OutcomeTaken), and enough nodes answered that the vote was
	// theirs to decide (it is not ErrNoQuorum). A failed acquisition waits
	// for the answers it needs to tell the two apart. errors.Is(err,
	// ErrTaken) is true only for a *QuorumError wrapping ErrNotAcquired, and
	// tells "busy", where waiting is the answer, from an outage, where nodes
	// need repair, without reading the per-node outcomes. When no majority
	// answered, a surviving node's "taken" does not make the lock busy: the
	// error is ErrNoQuorum. How many nodes said taken is in the
	// QuorumError's Nodes.
	ErrTaken = errors.New("redlock: lock held by another owner")
	// ErrQuarantined means the acquisition fell short because nodes that
	// restarted or lost their data less than one longest TTL ago (the
	// amnesia guard, see WithQuarantine) granted it but their votes did not
	// count. errors.Is(err, ErrQuarantined) holds for a *QuorumError
	// wrapping ErrNotAcquired whose last attempt had such a node; its Nodes
	// name them (OutcomeQuarantined) with the time left of each one's
	// quarantine (NodeResult.QuarantineLeft).
	ErrQuarantined = errors.New("redlock: votes of quarantined nodes not counted")
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

	// nodeQuarantined: a node quarantined as a whole (incarnation.go)
	// granted in the last attempt (ErrQuarantined).
	nodeQuarantined bool
}

// newQuorumError is the one way the package builds a QuorumError: op on key
// fell short of quorum in vote t (nil when nothing was sent), err is the
// sentinel and cause why, when known.
func newQuorumError(op Op, key string, quorum int, t *tally, err, cause error) *QuorumError {
	qe := &QuorumError{Op: op, Key: key, Quorum: quorum, Err: err, Cause: cause}
	if t != nil {
		qe.Granted, qe.Nodes = t.granted, t.results
		for i := range t.results {
			qe.nodeQuarantined = qe.nodeQuarantined || (t.results[i].Outcome == OutcomeQuarantined && t.epochs[i] == epochNodeQuarantined)
		}
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
	if e.Err == ErrNotAcquired && e.noQuorum() {
		b.WriteString(", too few answered")
	}
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

// Is reports whether e is a failed acquisition and target is ErrNoQuorum
// and its last attempt found no majority answering, or target is ErrTaken
// and that attempt met another owner while a majority could answer, or
// target is ErrQuarantined and a quarantined node granted in that attempt
// (see ErrNoQuorum, ErrTaken, ErrQuarantined). The sentinel and the cause are matched through
// Unwrap.
func (e *QuorumError) Is(target error) bool {
	if e.Err != ErrNotAcquired {
		return false
	}
	switch target {
	case ErrNoQuorum:
		return e.noQuorum()
	case ErrTaken:
		return !e.noQuorum() && slices.ContainsFunc(e.Nodes, func(n NodeResult) bool { return n.Outcome == OutcomeTaken })
	case ErrQuarantined:
		return e.nodeQuarantined
	}
	return false
}

// noQuorum reports whether so many nodes failed to answer in e's last
// attempt (unreachable, timed out, or an error reply) that the others were
// fewer than a quorum. Nodes the caller's context cut short, or that were
// never asked (pending), do not count as failed.
func (e *QuorumError) noQuorum() bool {
	_, failed := e.answers()
	return len(e.Nodes) > 0 && len(e.Nodes)-failed < e.Quorum
}

// majorityAnswered reports whether a quorum of nodes answered in e's last
// attempt (granted, taken, not held or quarantined): the nodes decided it.
// Neither this nor noQuorum holds when nodes the caller's context cut
// short, or that were never asked (pending), made the difference.
func (e *QuorumError) majorityAnswered() bool {
	answered, _ := e.answers()
	return answered >= e.Quorum
}

// answers counts the nodes of e's last attempt that answered, and those
// that failed to (unreachable, timed out, or an error reply).
func (e *QuorumError) answers() (answered, failed int) {
	for _, n := range e.Nodes {
		switch n.Outcome {
		case OutcomeGranted, OutcomeTaken, OutcomeNotHeld, OutcomeQuarantined:
			answered++
		case OutcomeUnreachable, OutcomeTimedOut, OutcomeError:
			failed++
		}
	}
	return answered, failed
}

// Unwrap returns the sentinel and, if set, the cause.
func (e *QuorumError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// Errors a Lease (and Do) ends with; test them with errors.Is.
var (
	// ErrLockLost means a lock kept alive by a Lease (or Do) stopped being
	// trustworthy while it was held: an extension failed, or the validity
	// ran out before an extension succeeded. Another client may hold the
	// lock now. The error wraps the failed extension's *QuorumError, so
	// errors.Is(err, ErrNotHeld) tells "taken or expired" from
	// errors.Is(err, ErrNoQuorum), "too few nodes answered".
	ErrLockLost = errors.New("redlock: lock lost")
	// ErrHoldLimit means a Lease (or Do) reached the maximum hold time set
	// with WithMaxHold, so it stopped extending the lock and ended its
	// context.
	ErrHoldLimit = errors.New("redlock: maximum hold time reached")
)

// ErrNoLeader means that a majority of the nodes answered Leader and no
// leader holds the election on a majority of them: none was elected, or the
// last one resigned or its TTL ran out (a hand-off may be under way).
var ErrNoLeader = errors.New("redlock: no leader")

// joinCause returns a and b as one cause ("a; b"); nil ones are left out.
func joinCause(a, b error) error {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return fmt.Errorf("%w; %w", a, b)
}

// errNilContext is what every call that takes a context returns for a nil
// one, before it does anything: the context would otherwise panic in a
// goroutine of the call, which the caller cannot recover.
var errNilContext = fmt.Errorf("%w: nil context", ErrInvalidArgument)
