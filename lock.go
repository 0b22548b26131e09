package redlock

// The Lock handle and what a holder does with it: read its validity,
// release it, extend it.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// Lock is an acquired lock: an immutable handle, safe to share between
// goroutines. Extend returns a new Lock; the old one keeps its old deadline.
// The handles of one lock (the ones Extend returns, a Lease's, nested ones)
// share whether the lock was released or lost, which Validity reports.
type Lock struct {
	client *Client
	cfg    config
	key    string // as the caller named it
	keys   []string
	owner  string
	// keyArgs and ownerArg are keys and owner as the acquisition boxed them
	// for its script call, for the calls on this lock (nodecall.NewScriptCallBoxed).
	keyArgs    []any
	ownerArg   any
	token      uint64
	ttl        time.Duration
	acquiredAt time.Time
	validUntil time.Time
	holdUntil  time.Time // the end of the minimum hold, WithMinHold (minhold.go)
	attempts   int
	nodes      []NodeResult
	nested     bool // a reentrant handle: Release leaves the nodes alone (reentrant.go)
	// holder is, for a nested handle, the outermost Lease keeping the lock
	// alive: the handle reports its validity, not that of the grant it
	// was copied from.
	holder *Lease
	// vouch: with the amnesia guard on, not every node granted in time with
	// a trusted epoch, so vouching writes may still be on their way: Release
	// repeats them where it deletes our key, in case it overtakes one.
	vouch bool
	// multi is set for a multi-key lock (multilock.go): keys then holds
	// each key's lock key, counter and epoch in turn, and Release and
	// Extend send the multi-key scripts.
	multi *multiKeys
	// rw is set for a read/write lock's reader or writer (rwmutex.go): keys
	// then holds its five keys, and Release and Extend send its scripts.
	rw *rwHold
	// state is shared by every handle of this lock: those Extend derives
	// and nested (reentrant) handles; and by
	// the acquisition's late replies.
	state *lockState
}

// lockState is what every handle of one acquired lock shares, with the
// acquisition that made it.
type lockState struct {
	// ended is set once the lock must no longer be trusted, whatever its
	// deadline says: Release was called, or the Lease keeping it declared
	// it lost. Validity reads it.
	ended atomic.Bool
	// released is set before Release sends its deletes: a grant that
	// arrives after that (a straggler of the acquisition) needs no
	// write-back any more.
	released atomic.Bool
	// calls says which nodes' acquire calls have returned (their SET has
	// run, or the call failed), and which of them were never sent. Release
	// sends node i its delete only once its call returned, so a delete
	// never overtakes its own SET; a call never sent needs no delete,
	// unless an extension put the key on that node since (reput). Likewise
	// a delete waits for a put-back in flight on its node.
	calls acquireCalls
	// longestTTL is the longest TTL (ns) the lock's keys were set or
	// extended with: an Extend never shortens a key, so the keys may live
	// that long after the last call that touched them.
	longestTTL atomic.Int64

	mu    sync.Mutex
	lease *Lease // the Lease keeping the lock alive; nil if none
	// turn orders the lock's Release calls: one at a time, each holding
	// its one token (made by the first Release). freed is set, by the
	// turn's holder, once a Release returned nil.
	turn  chan struct{}
	freed bool
}

// releaseTurn waits for the lock's turn to release and returns the function
// that hands it on.
func (s *lockState) releaseTurn() (next func()) {
	s.mu.Lock()
	if s.turn == nil {
		s.turn = make(chan struct{}, 1)
		s.turn <- struct{}{}
	}
	turn := s.turn
	s.mu.Unlock()
	<-turn // a channel: testing/synctest sees the wait as durable
	return func() { turn <- struct{}{} }
}

// noteTTL records a TTL the keys were set or extended with.
func (s *lockState) noteTTL(ttl time.Duration) {
	for {
		old := s.longestTTL.Load()
		if int64(ttl) <= old || s.longestTTL.CompareAndSwap(old, int64(ttl)) {
			return
		}
	}
}

// keysGoneBy returns a time by which every key of the lock has expired on
// its own, from now: an acquire call may still set one until its attempt's
// start + TTL (it waits that long for its reply), every other call that set
// or extended one will have ended within two per-node timeouts (a
// straggling extension that waited its turn), and none set a TTL longer
// than longestTTL. A delete waiting for a node's turn gives up then: past
// it there is nothing left to delete.
func (s *lockState) keysGoneBy(timeout time.Duration) time.Time {
	return time.Now().Add(2*time.Duration(s.longestTTL.Load()) + 2*timeout)
}

// newLockState is the state of an acquisition on n nodes, none of which
// has replied yet.
func newLockState(n int) *lockState {
	return &lockState{calls: acquireCalls{state: make([]atomic.Uint32, n), put: make([]atomic.Bool, n), putting: make([]atomic.Int32, n)}}
}

// acquireCalls follows an acquisition's call to each node: running, counted
// as a straggler (still running when the vote was decided: nodecall.Node.AddLate), or
// returned (sent or not). One atomic per node, and one channel only while
// someone waits for a call to return, rather than a channel per node.
type acquireCalls struct {
	state []atomic.Uint32 // callRunning...
	// put[i] is set before an extension puts the key back on node i
	// (reput): whatever the acquire call did there, the node may hold the
	// key now, so Release must send it a delete.
	put []atomic.Bool
	// putting[i] counts the put-backs on node i still running: a delete
	// sent beside one could run before its SET (go-redis's pool keeps no
	// order), so Release's delete there waits for them to return.
	putting []atomic.Int32
	mu      sync.Mutex
	wake    chan struct{} // made by a waiter, closed and cleared by the next return
}

// The states of an acquisition's call to one node.
const (
	callRunning  uint32 = iota
	callLate            // still running when the vote was decided
	callReturned        // returned; the command was sent
	callUnsent          // returned without sending anything (not admitted, shed)
)

// markLate counts node i's call as a straggler if it is still running, and
// reports whether it did.
func (ac *acquireCalls) markLate(i int) bool {
	return ac.state[i].CompareAndSwap(callRunning, callLate)
}

// markReturned records that node i's call returned, sent or not, wakes those
// waiting for a return, and reports whether markLate had counted it.
func (ac *acquireCalls) markReturned(i int, sent bool) (wasLate bool) {
	st := callReturned
	if !sent {
		st = callUnsent
	}
	wasLate = ac.state[i].Swap(st) == callLate
	ac.wakeWaiters()
	return wasLate
}

// rearm records that node i gets another acquire call of the same attempt
// (acquisition.reask), after its first one returned.
func (ac *acquireCalls) rearm(i int) { ac.state[i].Store(callRunning) }

// wakeWaiters wakes those waiting for a call to return (wait).
func (ac *acquireCalls) wakeWaiters() {
	ac.mu.Lock()
	if ac.wake != nil {
		close(ac.wake)
		ac.wake = nil
	}
	ac.mu.Unlock()
}

// ended reports whether node i's call has returned.
func (ac *acquireCalls) ended(i int) bool { return ac.state[i].Load() >= callReturned }

// returned reports whether node i's call has returned and no put-back is
// running there, and if so, whether the call was never sent and nothing
// else may have put the key there since.
func (ac *acquireCalls) returned(i int) (done, unsent bool) {
	st := ac.state[i].Load()
	return st >= callReturned && ac.putting[i].Load() == 0, st == callUnsent && !ac.put[i].Load()
}

// beginPut records that an extension is about to put the key back on node
// i, and reports whether it may: not once Release has begun (released),
// which would not delete a key put back after its delete. The counter is
// raised before released is read, and Release sets released before it
// reads the counter, so either the put-back sees the release or the
// release's delete waits for the put-back (endPut).
func (s *lockState) beginPut(i int) bool {
	ac := &s.calls
	ac.put[i].Store(true)
	ac.putting[i].Add(1)
	if s.released.Load() {
		s.endPut(i)
		return false
	}
	return true
}

// endPut records that a put-back on node i has returned.
func (s *lockState) endPut(i int) {
	s.calls.putting[i].Add(-1)
	s.calls.wakeWaiters()
}

// wait waits until node i's call, and any put-back there, has returned,
// and reports whether the call was never sent.
func (ac *acquireCalls) wait(i int) (unsent bool) {
	for {
		if done, unsent := ac.returned(i); done {
			return unsent
		}
		ac.mu.Lock()
		if done, unsent := ac.returned(i); done { // returned meanwhile
			ac.mu.Unlock()
			return unsent
		}
		if ac.wake == nil {
			ac.wake = make(chan struct{})
		}
		wake := ac.wake
		ac.mu.Unlock()
		<-wake
	}
}

// setLease records s as the Lease keeping the lock alive; it returns false
// when another Lease already does.
func (s *lockState) setLease(l *Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease != nil {
		return false
	}
	s.lease = l
	return true
}

// clearLease forgets l once it has stopped.
func (s *lockState) clearLease(l *Lease) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lease == l {
		s.lease = nil
	}
}

// stopLease stops the Lease keeping the lock alive, if any, and waits for
// its extender to end: a released lock must not be extended.
func (s *lockState) stopLease() {
	s.mu.Lock()
	l := s.lease
	s.mu.Unlock()
	if l != nil {
		l.stop()
	}
}

// Key returns the key as passed to Acquire (without the prefix).
func (l *Lock) Key() string { return l.key }

// Owner returns the random owner value stored on the nodes. Treat it as a
// secret: whoever knows it can release the lock.
func (l *Lock) Owner() string { return l.owner }

// Token returns the fencing token: it is greater than the token of every
// earlier holder of this key (docs/fencing.md states the conditions: node
// clocks that do not step back by more than the retention, and, with data
// loss, a clock skew between nodes shorter than a restart). Tokens start
// from a node's clock in microseconds, so they are large numbers, not 1, 2,
// 3; only their order means something. Pass it to the resource the lock
// protects. It is 0 when fencing is off.
func (l *Lock) Token() uint64 { return l.token }

// TTL returns the TTL the keys were set (or last extended) with. The keys
// live at least that long from the start of that call; an Extend never
// shortens them, so they may live longer.
func (l *Lock) TTL() time.Duration { return l.ttl }

// AcquiredAt returns when the lock was handed out (after the quorum, and
// the fencing write-back when one was needed, answered). For an extended lock, when the extension
// was.
func (l *Lock) AcquiredAt() time.Time { return l.acquiredAt }

// ValidUntil returns the validity deadline: the start of the attempt (or
// extension) plus TTL minus the drift allowance. Past it the lock may have
// expired on some node and another client may hold it. It does not change
// when the lock is released or lost before it: Validity says so. A nested
// (reentrant) handle returns its holder's Lease.ValidUntil, which follows
// the Lease's extensions.
func (l *Lock) ValidUntil() time.Time {
	if l.holder != nil {
		return l.holder.ValidUntil()
	}
	return l.validUntil
}

// Validity returns the validity time left: zero or negative once the lock
// must no longer be trusted. That is when the deadline (ValidUntil) has
// passed, and also, on every handle of the lock (those Extend returned, the
// Lease's, nested ones), as soon as Release was called on any of them (a
// nested handle's Release aside: the outermost holder releases) or a Lease
// keeping the lock declared it lost (ErrLockLost). It reads the monotonic
// clock. A nested (reentrant) handle returns its holder's Lease.Validity: it
// follows the Lease's extensions, and ends with the Lease.
func (l *Lock) Validity() time.Duration {
	if l.holder != nil {
		return l.holder.Validity()
	}
	left := time.Until(l.validUntil)
	if l.state.ended.Load() {
		return min(left, 0)
	}
	return left
}

// Attempts returns how many attempts the acquisition took.
func (l *Lock) Attempts() int { return l.attempts }

// Nodes returns each node's outcome in the attempt (or extension) that
// produced this Lock. A node still pending when the quorum was reached shows
// OutcomePending. The slice is a copy.
func (l *Lock) Nodes() []NodeResult { return append([]NodeResult(nil), l.nodes...) }

// Release deletes the lock key on every node where it still holds this
// lock's owner value, and returns as soon as no answer still to come could
// change the result (with healthy nodes: once a majority deleted the key);
// the other deletes end in the background and Client.Close waits for them.
// It runs even if ctx is already canceled, and returns within one per-node
// timeout from its start, a delete still queued in this client then going
// on in the background (see Releasing in the package doc for the queue in
// front of it and what is left on the nodes). It returns nil when a majority
// answered and the key is ours on none of them; a *QuorumError wrapping
// ErrNotHeld when a majority said the key had expired or been taken (keys of
// ours elsewhere are deleted all the same); one wrapping ErrNoQuorum when
// fewer than a majority answered (the rest expire at their TTL); ErrClosed
// after Close. Once called, Validity is zero or negative on every handle; a
// Lease keeping the lock is stopped first; Release calls of one lock run one
// at a time, later ones returning ErrNotHeld without a round trip; a nested
// handle's Release returns nil. Under WithMinHold the keys expire at the
// hold's end instead.
func (l *Lock) Release(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	if l.nested {
		return nil // the outermost holder releases (reentrant.go)
	}
	l.state.ended.Store(true)
	l.state.stopLease() // a released lock must not be extended
	ctx, end := l.cfg.startCall(ctx, OpRelease, l.key)
	start := time.Now()
	t, err := l.release(ctx)
	l.observeOp(ctx, OpRelease, start, l.ttl, t, nil, err)
	end(nil, err)
	return err
}

func (l *Lock) release(ctx context.Context) (*tally, error) {
	c := l.client
	next := l.state.releaseTurn()
	defer next()
	if l.state.freed {
		return nil, newQuorumError(OpRelease, l.key, c.quorum, nil, ErrNotHeld, errAlreadyReleased)
	}
	timeout := l.cfg.timeoutFor(l.ttl)
	done, open := c.eng.Begin(timeout) // Close waits for the release from here
	defer done()
	if !open {
		return nil, ErrClosed
	}
	l.state.released.Store(true)
	call := l.holdCall(time.Now()) // nil once the minimum hold has passed
	// This Client's waiters of the key that left and may still be
	// subscribed: the release tells the next waiter instead (luaWakeNext).
	skip := c.notify.leftChannels(l.keys[0])
	if l.rw != nil {
		call = l.rwReleaseCall(skip)
	} else if l.multi != nil {
		call = l.multiReleaseCall()
	} else if call == nil && l.vouch {
		call = releaseCall(releaseVouchScript, l.keys, l.keyArgs, skip, l.ownerArg, strconv.FormatUint(l.token, 10))
	} else if call == nil {
		call = releaseCall(releaseScript, l.keys[:1], l.keyArgs[:1], skip, l.ownerArg)
	}
	call.ForNodes(len(c.nodes))
	// A delete may wait for its node's turn (internal/nodecall: Queue) until the keys
	// would be gone anyway; its per-node timeout counts from its turn, so a
	// busy client does not report healthy nodes as timed out. Release does
	// not wait that long: see waitedOut.
	keysEnd := l.state.keysGoneBy(timeout)
	// The vote decides once a majority deleted the key (or can no longer);
	// the replies it did not wait for come here, for the rarer results that
	// "not held" answers decide (releaseCount), until one per-node timeout
	// from now, when Release returns whatever is still to come.
	lastAnswer := time.Now().Add(timeout)
	t, late, callCtx := c.voteQuorumKeep(c.eng.WithQueueBy(context.WithoutCancel(ctx), time.Now(), nil), timeout, func(ctx context.Context, n *node) reply {
		return l.deleteOn(ctx, n, call, skip, keysEnd, timeout)
	})
	if err := countLate(t, c.quorum, late, lastAnswer).result(); err != nil {
		return t, c.withMisconfig(newQuorumError(OpRelease, l.key, c.quorum, t, err, l.waitedOut(t, callCtx)))
	}
	l.state.freed = true
	return t, nil
}

// errDeletesQueued is the cause of a Release that returned before some of
// its deletes were even sent: they wait for a free connection to their node
// (or for the acquire call they follow to return), and go on in the
// background.
var errDeletesQueued = errors.New("deletes still waiting for their turn on their node go on in the background")

// waitedOut marks pending, in the results of a release vote whose node
// calls ran on callCtx, the nodes that the vote's clock marked timed out
// (no answer, Latency 0) while their delete may still be on time: it waits
// for its node's turn (a free connection) or for the acquire call it
// follows, or on the nodes Dial connects to, it got its turn late and its
// per-node timeout, counted from then, has not run out. Those deletes go on
// in the background (the Client tracks them; Close waits for them). It
// returns errDeletesQueued when some delete was not sent yet.
func (l *Lock) waitedOut(t *tally, callCtx context.Context) error {
	var cause error
	c := l.client
	for i := range t.results {
		r := &t.results[i]
		if r.Outcome != OutcomeTimedOut || r.Latency != 0 {
			continue
		}
		following := false
		if l.state.calls.state != nil {
			done, _ := l.state.calls.returned(i)
			following = !done
		}
		unsent := following || nodecall.WaitsForTurn(callCtx, c.nodes[i])
		if unsent || c.eng.Queued {
			r.Outcome, r.Err = OutcomePending, nil
		}
		if unsent {
			cause = errDeletesQueued
		}
	}
	return cause
}

// releaseCall is a release script's call with args, then the channels of
// skip (leftChannels) as further arguments.
func releaseCall(s *nodecall.Script, keys []string, keyArgs []any, skip []any, args ...any) *nodecall.ScriptCall {
	if len(skip) > 0 {
		args = append(args[:len(args):len(args)], skip...)
	}
	return nodecall.NewScriptCallBoxed(s, keys, keyArgs, args...)
}

// deleteOn sends node n the release's delete, with skip the channels the
// release passes over (releaseCall), once n's own acquire call
// has returned: a delete never overtakes its SET, since go-redis's
// connection pool does not keep the order of commands to one node. The delete may wait for the node's turn until
// keysEnd, when the key would expire anyway (nodecall.Engine.CleanupContext); the vote does
// not wait that long.
func (l *Lock) deleteOn(ctx context.Context, n *node, call *nodecall.ScriptCall, skip []any, keysEnd time.Time, timeout time.Duration) reply {
	c := l.client
	straggler := false
	if st := l.state; st.calls.state != nil {
		done, unsent := st.calls.returned(n.Idx)
		if !done {
			// A straggler of the acquisition, or an extension putting the
			// key back here: the delete waits for that call to return, in
			// the background once the vote is decided, and then
			// gets a per-node timeout of its own. This call stays part of
			// the vote, so Close waits for it.
			straggler = true
			unsent = st.calls.wait(n.Idx)
		}
		if unsent {
			return reply{Err: errShed} // nothing to delete
		}
	}
	n.Enter()
	defer n.Exit()
	wait := timeout
	if straggler {
		n.AddLate(1) // it follows a straggler
		defer n.AddLate(-1)
		// Like the acquire call it follows, it waits for its reply
		// until the key would be gone anyway: on a node slower than
		// the per-node timeout, a delete given up at the timeout (or
		// its new connection's handshake) would leave the late grant.
		wait = max(timeout, time.Until(keysEnd))
	}
	dctx, cancel := c.eng.CleanupContext(ctx, keysEnd, wait)
	defer cancel()
	code, err := call.Run(dctx, n).Int64()
	c.notify.released(l.keys[0], code, skip)
	return reply{Code: code, Err: err}
}

// countLate counts into the release vote t the replies that arrive after it
// was decided, until no answer still to come could change Release's result
// or lastAnswer, the last delete's deadline, marks the rest timed out.
func countLate(t *tally, quorum int, late <-chan reply, lastAnswer time.Time) releaseCount {
	rc := countRelease(t, quorum)
	if rc.decided() {
		return rc // the common case: no timer
	}
	expired := time.NewTimer(time.Until(lastAnswer))
	defer expired.Stop()
	for !rc.decided() {
		select {
		case r := <-late:
			res := &t.results[r.Idx]
			res.Outcome, res.Err, res.Latency = classify(r), r.Err, r.Latency
			rc.pending--
			rc.add(res.Outcome)
			if res.Outcome == OutcomeGranted {
				t.granted++
			}
		case <-expired.C:
			// The per-node timeout: whoever has not answered is timed out.
			for i := range t.results {
				if t.results[i].Outcome == OutcomePending {
					t.results[i].Outcome, t.results[i].Err = OutcomeTimedOut, context.DeadlineExceeded
				}
			}
			rc = countRelease(t, quorum)
		}
	}
	return rc
}

// releaseCount is what a release vote knows so far: how many nodes deleted
// the key, how many answered that it was not ours (not held or taken), how
// many have not answered yet.
type releaseCount struct {
	deleted, notOurs, pending, quorum int
}

func countRelease(t *tally, quorum int) releaseCount {
	rc := releaseCount{quorum: quorum}
	for _, r := range t.results {
		if r.Outcome == OutcomePending {
			rc.pending++
		} else {
			rc.add(r.Outcome)
		}
	}
	return rc
}

// add counts one more answer (a pending node's).
func (rc *releaseCount) add(o Outcome) {
	switch o {
	case OutcomeGranted:
		rc.deleted++
	case OutcomeNotHeld, OutcomeTaken:
		rc.notOurs++
	}
}

// Release's rule, for the answers counted: ErrNotHeld when a majority said
// the key was not ours, ErrNoQuorum when fewer than a majority answered,
// nil otherwise.
func (rc releaseCount) result() error {
	switch {
	case rc.notOurs >= rc.quorum:
		// The lock had expired (or was taken) before this release,
		// whatever the other nodes say: the holder must learn that it
		// overran its lock.
		return ErrNotHeld
	case rc.deleted+rc.notOurs < rc.quorum:
		return ErrNoQuorum
	}
	return nil
}

// decided reports whether the answers still pending cannot change result:
// of the three results, only one is still possible.
func (rc releaseCount) decided() bool {
	notHeld := rc.notOurs+rc.pending >= rc.quorum
	ours := rc.notOurs < rc.quorum
	noQuorum := ours && rc.deleted+rc.notOurs < rc.quorum
	released := ours && rc.deleted+rc.notOurs+rc.pending >= rc.quorum
	possible := 0
	for _, p := range []bool{notHeld, noQuorum, released} {
		if p {
			possible++
		}
	}
	return possible == 1
}

// Extend makes the lock live at least ttl more on every node that still
// holds it and returns a new Lock whose validity is ttl − elapsed − drift
// from the start of the extension; the fencing token is kept. It succeeds
// only if a majority applied it, and never revives a lock whose Validity is
// no longer positive (run out, released, or declared lost by its Lease):
// then it returns ErrNotHeld without a round trip, as does an extension in
// flight when Release is called. It never shortens a key's remaining TTL,
// and after a winning vote it puts the key back on nodes that lost it (see
// Extending in the package doc). Errors: ErrInvalidArgument for a bad ttl
// (also one longer than the retention, WithRetention); a *QuorumError
// wrapping ErrNotHeld when the lock is no longer held, or ErrNoQuorum when
// too few nodes answered (the receiver stays valid until its own deadline);
// ctx's error is wrapped too when ctx ended.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	ctx, end := l.cfg.startCall(ctx, OpExtend, l.key)
	start := time.Now()
	next, t, err := l.extend(ctx, ttl)
	l.observeOp(ctx, OpExtend, start, ttl, t, next, err)
	end(next, err)
	return next, err
}

func (l *Lock) extend(ctx context.Context, ttl time.Duration) (*Lock, *tally, error) {
	c := l.client
	timeout := l.cfg.timeoutFor(ttl)
	if err := l.cfg.checkLock(ttl); err != nil {
		return nil, nil, err
	}
	done, open := c.eng.Begin(timeout) // Close waits for the extension from here
	defer done()
	if !open {
		return nil, nil, ErrClosed
	}
	start := time.Now()
	if l.state.ended.Load() {
		return nil, nil, newQuorumError(OpExtend, l.key, c.quorum, nil, ErrNotHeld, errLockEnded)
	}
	if validUntil := l.ValidUntil(); !start.Before(validUntil) {
		cause := fmt.Errorf("validity ran out %v ago", start.Sub(validUntil).Round(time.Millisecond))
		return nil, nil, newQuorumError(OpExtend, l.key, c.quorum, nil, ErrNotHeld, cause)
	}
	// Recorded before the vote: a failed extension may still have applied
	// this TTL on some nodes, and Release must wait for those keys too.
	l.state.noteTTL(ttl)
	call := nodecall.NewScriptCallBoxed(extendScript, l.keys, l.keyArgs, l.ownerArg, c.ttlArg.Arg(ttl), c.retentionArg.Arg(l.cfg.retention))
	if l.multi != nil {
		call = l.multiExtendCall(ttl)
	} else if l.rw != nil {
		call = l.rwExtendCall(ttl)
	}
	t, _ := c.voteQuorum(ctx, timeout, func(ctx context.Context, n *node) reply {
		code, err := call.Run(ctx, n).Int64()
		return reply{Code: code, Err: err}
	}, nil)
	// The stragglers end in the background (done); the Client tracks them.
	now := time.Now()
	if t.granted < c.quorum {
		refused := 0
		for _, r := range t.results {
			if r.Outcome == OutcomeNotHeld || r.Outcome == OutcomeTaken {
				refused++
			}
		}
		err := ErrNotHeld
		if refused <= len(c.nodes)-c.quorum {
			err = ErrNoQuorum
		}
		return nil, t, c.withMisconfig(newQuorumError(OpExtend, l.key, c.quorum, t, err, callerEnded(ctx)))
	}
	if validityLeft(ttl, now.Sub(start), l.cfg.driftFactor) <= 0 {
		cause := fmt.Errorf("validity time ran out: extension took %v of the %v ttl", now.Sub(start), ttl)
		return nil, t, newQuorumError(OpExtend, l.key, c.quorum, t, ErrNotHeld, cause)
	}
	l.reput(ctx, t, start, ttl, timeout)
	if l.state.ended.Load() {
		// Released (or lost) while the extension was on its way: the
		// release may have come after it on the nodes.
		return nil, t, newQuorumError(OpExtend, l.key, c.quorum, t, ErrNotHeld, errLockEnded)
	}
	next := *l
	next.ttl, next.acquiredAt, next.nodes = ttl, now, t.results
	next.validUntil = start.Add(ttl - Drift(ttl, l.cfg.driftFactor))
	return &next, t, nil
}

// errAlreadyReleased is the cause of a Release after one that succeeded.
var errAlreadyReleased = errors.New("an earlier Release of the lock succeeded")

// errLockEnded is the cause of an Extend refused because the lock was
// released, or declared lost by its Lease.
var errLockEnded = errors.New("the lock was released or declared lost")

// reput puts the key back, set only if absent, on the nodes that answered
// "not held" to an extension a majority applied, with the time left of the
// extension's ttl; with fencing on the node's counter is raised to the token
// and with the guard on its epoch is vouched for (this holder validly holds
// the lock, so whatever the node forgot has no other valid holder). The
// nodes put back are reported as granted in t.
func (l *Lock) reput(ctx context.Context, t *tally, start time.Time, ttl, timeout time.Duration) {
	c := l.client
	if l.multi != nil || l.rw != nil {
		return // a multi-key or read/write lock is not put back (MultiLock.Extend, docs/rwlock.md)
	}
	gone := make(map[*node]bool)
	for i, r := range t.results {
		if r.Outcome == OutcomeNotHeld {
			gone[c.nodes[i]] = true
		}
	}
	left := (ttl - time.Since(start)).Truncate(time.Millisecond)
	if len(gone) == 0 || left < time.Millisecond {
		return
	}
	args := []any{l.owner, strconv.FormatInt(left.Milliseconds(), 10), strconv.FormatUint(l.token, 10), "0", retentionMs(l.cfg)}
	if l.cfg.quarantine > 0 {
		args[3] = "1"
	}
	put, done := c.voteAll(ctx, timeout, func(ctx context.Context, n *node) reply {
		if !gone[n] {
			return reply{Code: codeNotHeld}
		}
		// Release must delete here, whatever the acquire call did, and
		// only once this call has returned; after Release began, nothing
		// is put back.
		if !l.state.beginPut(n.Idx) {
			return reply{Code: codeNotHeld}
		}
		defer l.state.endPut(n.Idx)
		code, err := reputScript.Run(ctx, n.Client, l.keys, args...).Int64()
		return reply{Code: code, Err: err}
	})
	<-done
	for i, r := range put.results {
		if gone[c.nodes[i]] && r.Outcome == OutcomeGranted {
			t.results[i].Outcome = OutcomeGranted
			t.granted++
		}
	}
}
