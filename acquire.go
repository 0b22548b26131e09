package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// acquire is Acquire's retry loop around attempt.
func (c *Client) acquire(ctx context.Context, key string, ttl time.Duration, cfg config) (*Lock, error) {
	keys, err := checkAcquire(key, ttl, cfg)
	if err != nil {
		return nil, err
	}
	if c.inc != nil && cfg.quarantine > 0 {
		c.inc.use(ttl)
	}
	var (
		calls voteCalls // the latest attempt's node calls
		last  *QuorumError
		// w is this call's place among the waiters for the key, joined at
		// its first retry delay, so that a release cuts the delay short
		// (notify.go).
		w *lockWaiter
		// out is the run of attempts that found no majority answering.
		out = outage{c: c, cfg: cfg, ctx: ctx, key: key}
	)
	won := false
	defer func() {
		if won {
			w.leave()
		} else {
			w.giveUp()
		}
	}()
	// A Client whose Release just woke a waiter of the key lets it go
	// first: it takes a ticket behind the waiters and waits as after a
	// failed first attempt (the policy's NextRetry(1); none with NoRetry),
	// rather than race the woken waiter (notify.go); but not once a
	// waiter of this Client gives up, which may have been the one woken: a
	// free key is then taken by the first attempt, at once.
	if c.notify.yielding(keys[0]) {
		c.yieldTurn(ctx, cfg.retry, keys[0], &w)
	}
	for attempt := 1; ; attempt++ {
		// An attempt starts only once the last one's node calls have ended
		// or outlived its vote (its clean-up included; they ran during the
		// retry delay), and asks no node whose call of the last attempt
		// still waits for its reply (calls.last): attempts never overlap on
		// a node, so the clean-up has deleted the last attempt's key before
		// the next SET NX could find it, and a long wait holds one attempt's
		// calls, goroutines and pooled connections per node whatever the
		// number of attempts.
		calls.wait()
		done, open := c.eng.Begin(cfg.timeoutFor(ttl)) // Close waits for the attempt from here
		if !open {
			return nil, ErrClosed
		}
		w.mark()
		started := time.Now()
		lock, err := c.attempt(ctx, key, keys, ttl, cfg, &calls)
		done()
		if err == nil {
			// The stragglers of this attempt, and the clean-up of the failed
			// ones, may still run: they end in the background, tracked by
			// the Client (voteQuorum), so Close waits for them.
			out.answered(started, lock.nodes)
			lock.attempts = attempt
			won = true
			return lock, nil
		}
		if !errors.As(err, &last) {
			return nil, err // the owner generator failed: nothing was sent
		}
		last.Attempts = attempt
		if cause := c.misconfigured(last); cause != nil {
			if last.Cause != nil {
				cause = fmt.Errorf("%w; %w", last.Cause, cause)
			}
			last.Cause = cause
			break
		}
		if over := out.record(started, last); over != nil {
			if last.Cause != nil {
				over = fmt.Errorf("%w; %w", last.Cause, over)
			}
			last.Cause = over
			break
		}
		if !c.waitRetry(ctx, cfg.retry, attempt, keys[0], waitLock, &w, out.unannounced()) {
			break
		}
	}
	if err := callerEnded(ctx); err != nil {
		// The caller gave up: return now, not once the calls still
		// waiting for their replies have them. Only the deletes of the
		// grants that came back are waited for (a round trip to nodes
		// that just answered), and the replies on their way for
		// cancelGrace (on a healthy network they come within it, and
		// their grants are deleted before Acquire returns); a grant whose
		// reply comes later is deleted when it arrives
		// (acquisition.late), in the background.
		calls.waitUndos(cfg.timeoutFor(ttl))
		calls.waitFor(cancelGrace)
		if last.Cause == nil {
			last.Cause = err
		}
		return nil, last
	}
	calls.wait()
	return nil, last
}

// checkAcquire checks Acquire's arguments before any node is asked, and
// returns the keys of the lock: the lock key, its fencing counter and its
// epoch.
func checkAcquire(key string, ttl time.Duration, cfg config) ([]string, error) {
	name, err := checkKey(key, cfg.prefix)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkLock(ttl); err != nil {
		return nil, err
	}
	if err := cfg.checkMinHold(ttl); err != nil {
		return nil, err
	}
	return []string{name, fenceKey(name), epochKey(name)}, nil
}

// waitRetry waits the retry policy's delay after a failed attempt, and
// reports whether to make another: not once ctx ended or the policy gave up.
// A release that a majority of nodes announce to this waiter cuts the delay
// short: *w takes a ticket among the waiters for lock key name at the first
// delay (notify.go), waiting as kind k. With DefaultRetry, a waiter
// subscribed on a majority of nodes waits on to its queued delay (125-250
// ms) unless told first (a read/write lock's, only when it was subscribed
// before its last attempt: lockWaiter.sleep). out, when not nil, is an
// outage to announce once the policy agreed to wait.
func (c *Client) waitRetry(ctx context.Context, retry RetryPolicy, attempt int, name string, k waitKind, w **lockWaiter, out *outage) bool {
	if ctx.Err() != nil {
		return false
	}
	delay, ok := retry.NextRetry(attempt)
	if !ok {
		return false
	}
	if out != nil {
		out.announce()
	}
	if *w == nil && delay > 0 {
		*w = c.notify.joinAs(name, k)
	}
	(*w).sleep(ctx, delay, queuedDelay(retry))
	return ctx.Err() == nil
}

// yieldTurn is the wait of an Acquire that yields to a waiter a Release of
// this Client woke (notifier.yielding): waitRetry's wait after a first
// attempt, ended early when woken, or when a waiter of this Client gives up
// (lockWaiter.giveUp).
func (c *Client) yieldTurn(ctx context.Context, retry RetryPolicy, name string, w **lockWaiter) {
	delay, ok := retry.NextRetry(1)
	if !ok || delay <= 0 {
		return
	}
	*w = c.notify.joinYielding(name)
	(*w).sleep(ctx, delay, queuedDelay(retry))
}

// outage is one Acquire call's run of attempts that found no majority of
// the nodes answering (QuorumError.noQuorum): Acquire gives up once it has
// lasted the outage limit (WithOutageLimit), and tells the Observer and the
// logger when it starts waiting one out and when a majority answers again.
// AcquireMulti and Semaphore.Acquire (over its rounds) use it the same way.
type outage struct {
	c         *Client
	cfg       config
	ctx       context.Context
	key       string
	since     time.Time    // the start of the run's first attempt; zero: no run
	last      *QuorumError // the run's last attempt
	announced bool         // the run's start was reported
}

// record counts the failed attempt qe, started at started, and returns why
// Acquire must give up when the run has lasted the outage limit; nil when
// it may go on.
func (o *outage) record(started time.Time, qe *QuorumError) error {
	if !qe.noQuorum() {
		// Nodes left pending (not asked while this Acquire's previous
		// call there still waits for its reply, or cut short) say
		// nothing of an outage: only an attempt that a majority answered
		// ends one.
		if qe.majorityAnswered() {
			o.answered(started, qe.Nodes)
		}
		return nil
	}
	if o.since.IsZero() {
		o.since = started
	}
	o.last = qe
	if lasted := time.Since(o.since); o.cfg.outageLimit > 0 && lasted >= o.cfg.outageLimit {
		return fmt.Errorf("no majority of the nodes answered for %v (outage limit %v)", lasted.Round(time.Millisecond), o.cfg.outageLimit)
	}
	return nil
}

// unannounced returns o when its run has not been reported yet, else nil.
func (o *outage) unannounced() *outage {
	if o.since.IsZero() || o.announced {
		return nil
	}
	return o
}

// announce reports the start of the run (OpOutage, OK false), once.
func (o *outage) announce() {
	o.announced = true
	o.c.observeOutage(o.ctx, o.cfg, o.key, o.last, time.Since(o.since))
}

// answered ends the run at an attempt, started at started, in which a
// majority answered (nodes), and reports the end (OpOutage, OK true) if
// its start was reported.
func (o *outage) answered(started time.Time, nodes []NodeResult) {
	if o.since.IsZero() {
		return
	}
	if o.announced {
		o.c.observeOutageEnd(o.ctx, o.cfg, o.key, nodes, started.Sub(o.since))
	}
	o.since, o.last, o.announced = time.Time{}, nil, false
}

// voteCalls holds the done channels of the votes one attempt started (its
// vote, write-back and clean-up), each closed once that vote's node calls
// have all ended (the acquisition's: ended or outlived the vote), and the
// acquire calls of the latest attempt.
type voteCalls struct {
	done []<-chan struct{}
	last *lockState // the latest attempt's: see acquisition.vote
	// undos counts the clean-up deletes (acquisition.cleanUp) sent to
	// nodes whose acquire call had returned: what a caller who gave up
	// still waits for (waitUndos).
	undos sync.WaitGroup
}

// cancelGrace is how long an Acquire whose caller gave up still waits for
// the replies of its calls on their way, so that the grants among them are
// deleted before it returns.
const cancelGrace = 2 * time.Millisecond

// waitFor waits for every node call of the votes tracked, as wait does, but
// at most d; it forgets nothing.
func (vc *voteCalls) waitFor(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for _, done := range vc.done {
		select {
		case <-done:
		case <-t.C:
			return
		}
	}
}

// waitUndos waits for the clean-up deletes on the nodes that had answered,
// not for the calls still waiting for their replies; at most timeout (a
// delete queued behind this client's own calls goes on in the background).
func (vc *voteCalls) waitUndos(timeout time.Duration) {
	done := make(chan struct{})
	go func() {
		vc.undos.Wait()
		close(done)
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// add tracks one more vote.
func (vc *voteCalls) add(done <-chan struct{}) { vc.done = append(vc.done, done) }

// wait waits for every node call of the votes tracked (each bounded by the
// per-node timeout), then forgets them.
func (vc *voteCalls) wait() {
	for _, done := range vc.done {
		<-done
	}
	clear(vc.done)
	vc.done = vc.done[:0]
}

// errShed is the error of a call not sent to a node because that node
// already had too many calls of this Client running (nodecall.Engine.EnterAcquire). An
// acquisition's vote leaves such a node pending (reply.shed): it was not
// asked, so it neither answered nor timed out.
var errShed = fmt.Errorf("%w: the node has too many calls in flight: %w", nodecall.ErrNotSent, context.DeadlineExceeded)

// attempt states, read by late replies to know what they still need.
const (
	undecided int32 = iota
	succeeded
	failed
)

// acquisition is the state one attempt shares with its late replies: a grant
// whose reply arrives after the vote was decided still needs something done on
// its node, which depends on how the attempt ended.
type acquisition struct {
	c          *Client
	cfg        config
	ctx        context.Context // the caller's: pass on only its values (context.WithoutCancel), made where needed
	key        string          // as the caller named it
	keys       []string
	ttl        time.Duration
	owner      string
	timeout    time.Duration
	quarantine time.Duration // 0: guard off
	// shared is the state the Lock will point to: whether it was released,
	// and which nodes' acquire calls have returned.
	shared *lockState
	// decided is closed by decide: the attempt's calls still waiting for
	// a node's turn (internal/nodecall: Queue) are then not sent. A straggler would
	// only set a key to be written back or deleted, and the Lock's Release
	// would wait for it.
	decided chan struct{}
	// start is when the attempt started, the origin of its validity time;
	// voteCtx the context of its vote and write-back (nodecall.Engine:
	// WithQueueBy).
	start   time.Time
	voteCtx context.Context
	call    *nodecall.ScriptCall // the acquire script's command, the same for every node

	// unsure: a node that said "taken" was asked again (reask) and did
	// not answer: the key may still be there, so the vote is no first use.
	unsure bool

	mu    sync.Mutex
	state int32   // undecided, succeeded or failed
	token uint64  // the token, once succeeded
	early []reply // late grants received while undecided
}

// grant runs the acquire script on one node and reads its reply: -1 taken,
// the counter alone for a grant with the guard off or a trusted epoch,
// -2 - counter for a grant that created the epoch just now, else {code,
// counter, epoch state, epoch age}.
func (a *acquisition) grant(ctx context.Context, n *node) reply {
	snap := a.c.incSnapshot(n)
	v, err := a.call.Run(ctx, n).Result()
	if err != nil {
		// A call that gave up its wait for a connection because every one
		// waits for a reply long overdue was not sent: the node is left
		// pending, as when EnterAcquire sheds the call.
		return reply{Err: err, Shed: errors.Is(err, nodecall.ErrOverdue)}
	}
	if c, ok := v.(int64); ok {
		switch {
		case c == -1:
			return reply{Code: codeTaken}
		case c < -1:
			return a.c.nodeVote(a.quarantine, n, snap, reply{Code: codeQuarantined, Counter: uint64(-2 - c), Epoch: epochNew, Left: a.quarantine}, "", true)
		}
		return a.c.nodeVote(a.quarantine, n, snap, reply{Code: codeApplied, Counter: uint64(c), Epoch: epochTrusted}, "", false)
	}
	vs, _ := v.([]any)
	var res [4]int64
	ok := len(vs) == len(res) || len(vs) == len(res)+1
	for i := 0; ok && i < len(res); i++ {
		res[i], ok = vs[i].(int64)
	}
	var mark string
	if ok && len(vs) > len(res) {
		mark, ok = vs[len(res)].(string)
	}
	if !ok || res[1] < 0 {
		return reply{Err: fmt.Errorf("redlock: unexpected acquire reply %v", v)}
	}
	r := reply{Code: res[0], Counter: uint64(res[1]), Epoch: res[2]}
	if r.Code == codeApplied && (r.Epoch == epochQuarantined || r.Epoch == epochNew) {
		r.Code, r.Left = codeQuarantined, a.quarantine-time.Duration(res[3])*time.Millisecond
	}
	return a.c.nodeVote(a.quarantine, n, snap, r, mark, true)
}

// late receives a reply that arrived after the vote was decided: the acquire
// calls wait for their reply until the key would have expired (voteAcquire),
// so a grant that lands after the caller gave up is seen and taken back.
// Grants that come while the attempt is still undecided (it may be writing
// the token back) wait for decide.
//
// A "taken" from a node whose client may re-send a command (!noResend) can
// be about our own key: the first copy of the SET applied, its reply was
// lost, and the re-sent copy found our key. When the attempt failed, it
// gets the owner-checked undo like a late grant: the clean-up's undo may
// have reached the node before that first copy ran. (After a success the
// key is the holder's, and Release deletes it on every node.)
func (a *acquisition) late(r reply) {
	if r.Err != nil {
		// No answer, though the call was sent: its SET may have run.
		// After a failure, the clean-up left this node to this reply.
		if !errors.Is(r.Err, nodecall.ErrNotSent) {
			a.mu.Lock()
			st := a.state
			a.mu.Unlock()
			if st == failed {
				a.settle(r, failed, 0)
			}
		}
		return
	}
	if r.Code == codeTaken && !a.c.nodes[r.Idx].NoResend {
		a.mu.Lock()
		st := a.state
		a.mu.Unlock()
		if st == failed {
			a.settle(r, failed, 0)
		}
		return
	}
	if r.Code != codeApplied && r.Code != codeQuarantined {
		return
	}
	a.mu.Lock()
	st, token := a.state, a.token
	if st == undecided {
		a.early = append(a.early, r)
		a.mu.Unlock()
		return
	}
	a.mu.Unlock()
	a.settle(r, st, token)
}

// decide records how the attempt ended and settles the grants that arrived
// late while it was undecided. A failed attempt's clean-up vote, sent after
// decide, reaches every node: those grants need nothing more.
func (a *acquisition) decide(st int32, token uint64) {
	a.mu.Lock()
	a.state, a.token = st, token
	early := a.early
	a.early = nil
	a.mu.Unlock()
	if a.decided != nil {
		close(a.decided)
	}
	if st == failed || len(early) == 0 {
		return
	}
	untrack := a.c.eng.Track()
	go func() {
		defer untrack()
		for _, r := range early {
			a.settle(r, st, token)
		}
	}()
}

// settle finishes a late grant on its node. After a failure the key is
// deleted (the SET ran before this reply, the clean-up's delete may have run
// before the SET). After a release nothing is left to do: Release sends
// this node its delete only once this reply has arrived
// (lockState.calls). After a success the node gets what the granting
// nodes got: the token written back if its counter is below it, and, with
// the guard on, the holder's vouching if its epoch is not trusted (however
// late the grant, it holds this holder's key, so it has forgotten nothing
// that still matters; docs/amnesia.md).
func (a *acquisition) settle(r reply, st int32, token uint64) {
	n := a.c.nodes[r.Idx]
	if st == failed {
		// Its SET ran before this reply: the key is gone by now + TTL.
		ctx, cancel := a.c.eng.CleanupContext(a.ctx, time.Now().Add(a.ttl), a.timeout)
		defer cancel()
		a.undo().Run(ctx, n)
		return
	}
	if a.shared.released.Load() {
		return
	}
	lift := a.cfg.fencing && r.Counter < token
	vouch := a.quarantine > 0 && r.Epoch != epochTrusted
	if lift || vouch {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.timeout)
		defer cancel()
		a.followUp(ctx, n, token, lift, vouch)
	}
}

// followUp runs fenceScript on one node: the owner-checked token write-back
// (lift) and vouching.
func (a *acquisition) followUp(ctx context.Context, n *node, token uint64, lift, vouch bool) reply {
	tok, trust := "0", "0"
	if lift {
		tok = strconv.FormatUint(token, 10)
	}
	if vouch {
		trust = "1"
	}
	code, err := fenceScript.Run(ctx, n.Client, a.keys, a.owner, tok, trust, retentionMs(a.cfg)).Int64()
	return reply{Code: code, Err: err}
}

// attempt makes one acquisition attempt, in the steps of the Redlock spec
// with fencing and the amnesia guard: start it, vote, count the votes (the
// guard's first-use rule), write the token back, check the validity time,
// then hand out the Lock or clean up. It returns the Lock, or a
// *QuorumError when the nodes did not grant it, or (nothing sent) the owner
// generator's error. The votes it starts are added to calls.
func (c *Client) attempt(ctx context.Context, key string, keys []string, ttl time.Duration, cfg config, calls *voteCalls) (*Lock, error) {
	a, err := c.startAttempt(ctx, key, keys, ttl, cfg)
	if err != nil {
		return nil, err
	}
	acq := a.vote(calls)
	acq = a.reask(acq, calls)
	grants := a.countVotes(key, acq)
	ok := acq.granted >= c.quorum
	var (
		token   uint64
		cause   error
		written *tally // the write-back's vote, if one was needed
	)
	if ok && cfg.fencing {
		token, written, cause = a.fence(grants, calls)
		ok = cause == nil
	}
	acquiredAt := time.Now()
	validity, ranOut := a.validity(acquiredAt)
	if ok && ranOut != nil {
		ok, cause = false, ranOut
	}
	c.observeAttempt(ctx, cfg, key, ok, acq, acquiredAt.Sub(a.start), validity, ttl, cause)
	if !ok {
		return nil, a.fail(acq, cause, calls)
	}
	return a.handOut(acq, grants, token, written, acquiredAt), nil
}

// startAttempt draws the attempt's owner value and prepares what its node
// calls share. A generator that fails, or returns "", is an error: nothing
// is sent.
func (c *Client) startAttempt(ctx context.Context, key string, keys []string, ttl time.Duration, cfg config) (*acquisition, error) {
	owner, err := cfg.owner()
	if err == nil && owner == "" {
		// A generator that returns "" is misconfigured, not unlucky: every
		// holder would share that value and release each other's locks.
		return nil, fmt.Errorf("%w: acquire %s: the owner generator returned an empty value", ErrInvalidArgument, keyText(key))
	}
	if err != nil {
		cfg.logger.Error("redlock: owner generator failed", "key", keyAttr(key), "err", err)
		return nil, fmt.Errorf("%w: acquire %s: owner generator: %w", ErrNotAcquired, keyText(key), err)
	}
	a := &acquisition{
		c: c, cfg: cfg, ctx: ctx, key: key, keys: keys, ttl: ttl, owner: owner,
		timeout: cfg.timeoutFor(ttl), shared: newLockState(len(c.nodes)),
	}
	if cfg.quarantine > 0 {
		a.quarantine = max(cfg.quarantine, ttl)
	}
	a.call = a.acquireCall()
	a.start = time.Now()
	// On the nodes Dial connected to, a call may wait for a free connection
	// (internal/nodecall: Queue) as long as an answer could still leave the lock some
	// validity, and until the attempt is decided; the wait counts in the
	// elapsed time, measured from start.
	if c.eng.Queued {
		a.decided = make(chan struct{})
	}
	a.voteCtx = c.eng.WithQueueBy(ctx, a.start.Add(ttl-Drift(ttl, cfg.driftFactor)-a.timeout-minValidity), a.decided)
	return a, nil
}

// acquireCall is the acquire script's command, the same for every node:
// the owner, the TTL, the guard's quarantine (-1: off), the retention,
// fencing on or off, and the proposed seed of new counters.
func (a *acquisition) acquireCall() *nodecall.ScriptCall {
	qMs := "-1" // guard off
	if a.quarantine > 0 {
		qMs = strconv.FormatInt(a.quarantine.Milliseconds(), 10)
	}
	fence := "0"
	if a.cfg.fencing {
		fence = "1"
	}
	seed, seedNext := seedProposal(time.Now())
	c := a.c
	return nodecall.NewScriptCall(acquireScript, a.keys, a.owner, c.ttlArg.Arg(a.ttl), qMs, c.retentionArg.Arg(a.cfg.retention), fence, seed, seedNext).ForNodes(len(c.nodes))
}

// vote asks every node for the key and decides at the quorum; the node
// calls still running then are counted as stragglers (nodecall.Node.AddLate). Each call
// waits for its reply until the key would have expired had it been set when
// the attempt began, so that a late grant is seen (late). A node whose call
// of the Acquire's previous attempt still waits for its reply is not asked
// (it stays pending), nor is any node once ctx has ended.
func (a *acquisition) vote(calls *voteCalls) *tally {
	return a.c.acquireVote(a.voteCtx, a.ctx, a.timeout, a.start.Add(a.ttl), a.shared, calls, a.grant, a.late)
}

// acquireVote is the vote of an acquisition attempt (acquisition.vote,
// multiAcq.vote): voteAcquire with grant as each node's call (acquireOp,
// after the previous attempt's calls.last), lingering until linger; the
// calls still running once it is decided are counted as stragglers. The
// vote is added to calls, and shared becomes calls.last.
func (c *Client) acquireVote(voteCtx, ctx context.Context, timeout time.Duration, linger time.Time, shared *lockState, calls *voteCalls, grant nodeOp, late func(reply)) *tally {
	acq, over := c.voteAcquire(voteCtx, timeout, linger, c.acquireOp(ctx, shared, calls.last, grant), late)
	calls.add(over)
	calls.last = shared
	for i, n := range c.nodes {
		if shared.calls.markLate(i) { // a straggler
			n.AddLate(1)
		}
	}
	return acq
}

// acquireOp is an acquisition's call to one node: grant, unless the
// caller's ctx has ended, prev's call there (the previous attempt's; nil:
// none) still waits for its reply, or the node is backed up
// (nodecall.Engine.EnterAcquire). It records in shared that the call
// returned, and whether it was sent, before the vote counts its reply.
func (c *Client) acquireOp(ctx context.Context, shared, prev *lockState, grant nodeOp) nodeOp {
	return func(vctx context.Context, n *node) reply {
		r := reply{Err: errShed, Shed: true}
		if err := ctx.Err(); err != nil {
			r = reply{Err: fmt.Errorf("%w: %w", nodecall.ErrNotSent, err)}
		} else if (prev == nil || prev.calls.ended(n.Idx)) && c.eng.EnterAcquire(n) {
			r = grant(vctx, n)
			n.Exit()
		}
		// Not sent (shed, or the node's queue dropped it): no clean-up.
		if shared.calls.markReturned(n.Idx, !errors.Is(r.Err, nodecall.ErrNotSent)) {
			n.AddLate(-1)
		}
		return r
	}
}

// reaskRounds is how many times one attempt asks again the nodes that said
// "taken" to a split first use (reask).
const reaskRounds = 3

// reask settles a split first use (tally.splitFirstUse): several clients
// made the first use of the key at once, and this attempt got a majority of
// grants on epochs created just now, but the other nodes said "taken". The
// other attempts have fewer than a majority, so they fail and take their
// keys back; reask waits about one round trip (the slowest answer of the
// last round, at least 1 ms), asks those nodes again with the same owner
// value, and returns the new tally: the grants it kept, the new answers,
// and the other nodes' first ones. It gives up, returning the last tally,
// after reaskRounds rounds, once the attempt has lasted one per-node
// timeout, or when a node's client may re-send a command (a "taken" may
// then be our own key). A node asked again that does not answer makes the
// vote no first use (unsure): its key may still be there. The first-use
// rule then reads each node's last answer; docs/amnesia.md, "First use of
// a key", says why that is safe.
func (a *acquisition) reask(acq *tally, calls *voteCalls) *tally {
	for round := 0; round < reaskRounds && a.quarantine > 0 && !a.unsure && acq.splitFirstUse(); round++ {
		wait := time.Millisecond
		for i, r := range acq.results {
			wait = max(wait, r.Latency)
			if r.Outcome == OutcomeTaken && !a.c.nodes[i].NoResend {
				return acq
			}
		}
		if time.Since(a.start)+wait >= a.timeout {
			return acq
		}
		if sleepCtx(a.ctx, wait); a.ctx.Err() != nil {
			return acq
		}
		acq = a.revote(acq, calls)
	}
	return acq
}

// revote is one round of reask: the nodes that said "taken" in prev get
// the acquire call again, the others' answers in prev stand. Its calls are
// tracked like the first vote's (lockState.calls, late, calls).
func (a *acquisition) revote(prev *tally, calls *voteCalls) *tally {
	c := a.c
	again := make([]bool, len(c.nodes))
	for i := range prev.results {
		if prev.results[i].Outcome == OutcomeTaken {
			again[i] = true
			a.shared.calls.rearm(i)
		}
	}
	ask := c.acquireOp(a.ctx, a.shared, nil, a.grant)
	acq, over := c.voteAcquire(a.voteCtx, a.timeout, a.start.Add(a.ttl), func(ctx context.Context, n *node) reply {
		if !again[n.Idx] {
			return prev.replay(n.Idx)
		}
		return ask(ctx, n)
	}, a.late)
	calls.add(over)
	for i, n := range c.nodes {
		if again[i] && a.shared.calls.markLate(i) { // a straggler
			n.AddLate(1)
		}
	}
	for i := range acq.results {
		switch {
		case !again[i]:
			acq.results[i].Latency = prev.results[i].Latency
		case acq.results[i].Outcome != OutcomeGranted && acq.results[i].Outcome != OutcomeQuarantined && acq.results[i].Outcome != OutcomeTaken:
			a.unsure = true
		}
	}
	return acq
}

// fence derives the fencing token from the grants and, unless a quorum of
// them already returned it, writes it back: the lock is handed out only
// once a majority holds the token. written is the write-back's vote (nil
// when none was needed); cause says why a write-back fell short.
func (a *acquisition) fence(grants grantSet, calls *voteCalls) (token uint64, written *tally, cause error) {
	token = grants.token()
	if grants.agreed(a.c.quorum) {
		return token, nil, nil
	}
	fence, done := a.writeBack(a.voteCtx, grants, token)
	calls.add(done)
	if fence.granted < a.c.quorum {
		cause = writeBackError(fence, grants, token, a.c.quorum)
	}
	return token, fence, cause
}

// validity is the validity time the attempt leaves at acquiredAt, the
// Redlock spec's TTL − elapsed − clock drift; ranOut says so when none is
// left, and the lock must then not be handed out.
func (a *acquisition) validity(acquiredAt time.Time) (validity time.Duration, ranOut error) {
	a.start = a.cfg.mutant.AcquireStart(a.start, acquiredAt) // chaos mutant hook
	elapsed := acquiredAt.Sub(a.start)
	validity = validityLeft(a.ttl, elapsed, a.cfg.driftFactor)
	if validity <= 0 {
		ranOut = fmt.Errorf("validity time ran out: acquisition took %v of the %v ttl", elapsed.Round(time.Microsecond), a.ttl)
	}
	return validity, ranOut
}

// handOut ends a successful attempt: the late grants and the grants that
// still need the token or vouching get them in the background, and the
// caller gets the Lock.
func (a *acquisition) handOut(acq *tally, grants grantSet, token uint64, written *tally, acquiredAt time.Time) *Lock {
	a.decide(succeeded, token)
	a.finishGrants(grants, token, written)
	a.shared.noteTTL(a.ttl)
	return &Lock{
		client: a.c, cfg: a.cfg, key: a.key, keys: a.keys, owner: a.owner, token: token,
		keyArgs: a.call.BoxedKeys(len(a.keys)), ownerArg: a.call.BoxedArg(0),
		vouch: a.quarantine > 0 && !grants.allTrusted(), ttl: a.ttl,
		acquiredAt: acquiredAt, validUntil: a.start.Add(a.ttl - Drift(a.ttl, a.cfg.driftFactor)),
		nodes: acq.results, state: a.shared, holdUntil: acquiredAt.Add(a.cfg.minHold),
	}
}

// fail ends a failed attempt: its key is deleted in the background where
// its SET may have applied (cleanUp), and the caller gets the
// *QuorumError, whose cause is the caller's context error if no other.
func (a *acquisition) fail(acq *tally, cause error, calls *voteCalls) *QuorumError {
	a.decide(failed, 0)
	calls.add(a.cleanUp(acq, &calls.undos))
	if cause == nil {
		cause = callerEnded(a.ctx)
	}
	return newQuorumError(OpAcquire, a.key, a.c.quorum, acq, ErrNotAcquired, cause)
}

// undo is the call that takes a failed attempt's grant back on a node: the
// owner-checked delete of its key and, with the amnesia guard on, of the
// epoch its grant created there (abandonScript).
func (a *acquisition) undo() *nodecall.ScriptCall {
	owner := a.call.BoxedArg(0) // boxed once for the attempt
	if a.quarantine > 0 {
		return nodecall.NewScriptCallBoxed(abandonScript, a.keys, a.call.BoxedKeys(len(a.keys)), owner)
	}
	return nodecall.NewScriptCallBoxed(releaseScript, a.keys[:1], a.call.BoxedKeys(1), owner)
}

// cleanUp takes the failed attempt's grants back (undo) on every node that
// may hold its key: all but those that answered "taken". Where the acquire
// call still waits for its reply, the undo does not wait for a free
// connection, and late sends another once the reply, or the call's failure,
// comes: the first may have overtaken the SET, or not been sent. The
// Redlock spec unlocks every
// instance, since a node whose reply was lost may have set the key; a
// "taken" reply is no such node when the node's client never re-sends a
// command (node.noResend: Dial's clients, and New's with MaxRetries -1): it
// is the answer to our only SET there, and that SET did not apply. (A client
// that re-sends may report "taken" about our own key, whose first SET
// applied: such nodes get the delete.) Under contention that spares every
// loser a delete on most nodes. The calls may wait for a connection until
// the keys would have expired anyway.
//
// undos counts the deletes sent to nodes whose acquire call had returned
// when the clean-up began, until each has returned.
func (a *acquisition) cleanUp(acq *tally, undos *sync.WaitGroup) <-chan struct{} {
	c := a.c
	rel := a.undo().ForNodes(len(c.nodes))
	// answered[i]: node i's acquire call had returned, sent, and may have
	// set the key: its delete is counted in undos.
	var answeredBuf [8]bool
	answered := answeredBuf[:0]
	for i := range c.nodes {
		done, unsent := a.shared.calls.returned(i)
		ok := done && !unsent && (acq.results[i].Outcome != OutcomeTaken || !c.nodes[i].NoResend)
		answered = append(answered, ok)
		if ok {
			undos.Add(1)
		}
	}
	// Each delete may wait for its node's turn until the key would be gone
	// anyway: a SET that ran before now expires by now + TTL (the stragglers'
	// later SETs are deleted again when they answer: settle).
	// Nobody counts the answers (startVote without Count): the attempt's
	// caller does not wait for them, and the next attempt waits for done.
	b := c.startVote(c.eng.WithQueueBy(context.WithoutCancel(a.ctx), time.Now().Add(a.ttl), nil), decideAll, len(c.nodes), nodecall.Vote{Timeout: a.timeout, Op: func(ctx context.Context, n *node) reply {
		if answered[n.Idx] {
			defer undos.Done()
		}
		if _, unsent := a.shared.calls.returned(n.Idx); unsent {
			return reply{Err: errShed} // nothing was sent: nothing to delete
		}
		if acq.results[n.Idx].Outcome == OutcomeTaken && n.NoResend {
			return reply{Code: codeTaken} // our SET did not apply there
		}
		if !a.shared.calls.ended(n.Idx) {
			// Its acquire call still waits for its reply, on one of the
			// node's connections: the undo gets a free one now or is
			// left to late (on the nodes Dial connects to).
			nctx, _, cancel := c.eng.NodeContext(c.eng.WithQueueBy(context.WithoutCancel(a.ctx), time.Now(), nil), a.timeout)
			defer cancel()
			ctx = nctx
		}
		n.Enter()
		defer n.Exit()
		code, err := rel.Run(ctx, n).Int64() // a waiter told here: a minority, it wakes nobody
		return reply{Code: code, Err: err}
	}})
	return b.Done()
}

// countVotes applies the amnesia guard's first-use rule to the vote, logs
// the quarantined votes, and returns the grants received in time.
func (a *acquisition) countVotes(key string, acq *tally) grantSet {
	if acq.brandNew() && !a.unsure {
		// First use of the key: no node has any history it could have
		// forgotten, so every fresh vote counts. The epochs stay as the
		// nodes reported them: those nodes still need vouching.
		for i := range acq.results {
			if acq.results[i].Outcome == OutcomeQuarantined && acq.epochs[i] == epochNew {
				acq.results[i].Outcome, acq.results[i].QuarantineLeft = OutcomeGranted, 0
				acq.granted++
			}
		}
	}
	g := grantSet{t: acq, idx: make([]int, 0, len(acq.results))}
	for i, r := range acq.results {
		switch r.Outcome {
		case OutcomeQuarantined:
			if acq.epochs[i] == epochNodeQuarantined {
				g.idx = append(g.idx, i) // logged once, when it entered its quarantine
				continue
			}
			a.cfg.logger.Warn("redlock: vote not counted: node quarantined by the amnesia guard",
				"key", keyAttr(key), "node", r.Node, "quarantine_left", r.QuarantineLeft)
			fallthrough
		case OutcomeGranted:
			g.idx = append(g.idx, i)
		}
	}
	return g
}

// grantSet is the nodes that set the key and answered before the vote was
// decided, counted or quarantined: each holds the key with the counter and
// epoch it reported.
type grantSet struct {
	t   *tally
	idx []int
}

// token is the fencing token: the highest counter among the grants. Every
// counter counts, trusted or not: a node that lost its counter re-seeded it
// from the clock (this attempt's or its own), above every earlier token
// (docs/fencing.md, assumption C).
func (g grantSet) token() uint64 {
	var m uint64
	for _, i := range g.idx {
		m = max(m, g.t.counters[i])
	}
	return m
}

// agreed reports whether at least quorum grants returned the token itself:
// each of them incremented its counter to the token in the same atomic step
// as its grant, so no write-back is needed.
func (g grantSet) agreed(quorum int) bool {
	tok, n := g.token(), 0
	for _, i := range g.idx {
		if g.t.counters[i] == tok {
			n++
		}
	}
	return n >= quorum
}

// allTrusted reports whether every node granted in time with a trusted
// epoch, so that no node needs vouching.
func (g grantSet) allTrusted() bool {
	if len(g.idx) < len(g.t.results) {
		return false
	}
	for _, i := range g.idx {
		if g.t.epochs[i] != epochTrusted {
			return false
		}
	}
	return true
}

// writeBack sends the token, owner-checked, to the grants whose counter is
// below it (vouching for them too where their epoch is not trusted), and
// decides at a majority of nodes whose counter is at least the token while
// our key is on them: the grants that returned the token count at once.
func (a *acquisition) writeBack(ctx context.Context, g grantSet, token uint64) (*tally, <-chan struct{}) {
	need := make(map[*node]int, len(g.idx)) // node → index, for the grants
	for _, i := range g.idx {
		need[a.c.nodes[i]] = i
	}
	return a.c.voteQuorum(ctx, a.timeout, func(ctx context.Context, n *node) reply {
		i, ok := need[n]
		switch {
		case !ok:
			return reply{Code: codeNotHeld} // not a grant: nothing to write
		case g.t.counters[i] == token:
			return reply{Code: codeApplied} // finishGrants vouches if needed
		}
		return a.followUp(ctx, n, token, true, a.quarantine > 0 && g.t.epochs[i] != epochTrusted)
	}, nil)
}

// writeBackError says how a write-back fell short: how many nodes had the
// token (the grants that returned it, and those written to in time), and
// what each node written to answered. The grants that returned the token
// are counted from the grants themselves, not from the write-back's vote,
// which may be decided by failures before their calls are counted.
func writeBackError(fence *tally, g grantSet, token uint64, quorum int) error {
	var b strings.Builder
	on := 0
	for _, i := range g.idx {
		r := fence.results[i]
		switch {
		case g.t.counters[i] == token:
			on++
		case r.Outcome == OutcomeGranted:
			on++
			fallthrough
		default:
			fmt.Fprintf(&b, ", %s %s", r.Node, r.Outcome)
		}
	}
	return fmt.Errorf("fencing write-back: the token is on %d of %d nodes needed (written to%s)", on, quorum, strings.TrimPrefix(b.String(), ","))
}

// vouchDelay is how long after a successful acquisition finishGrants waits
// before it vouches for untrusted grants that need no token written back (a
// key's first use, with the amnesia guard). A Release sent by then vouches
// itself where it deletes the key (releaseVouchScript), so a lock held that
// briefly costs no extra round trip to every node.
const vouchDelay = 10 * time.Millisecond

// finishGrants sends, in the background, what a successful acquisition's
// grants still need beyond the decision: the token to grants whose counter
// is below it, and vouching to untrusted grants (amnesia guard); vouching
// alone waits vouchDelay and is not sent once the lock was released. It
// costs no latency; Close waits for it. The grants that applied the
// write-back (written) before its majority decided have had theirs; the
// others get it again here: the write-back's calls still running when
// Acquire returned end with the caller's context, which a deferred cancel
// ends at once.
func (a *acquisition) finishGrants(g grantSet, token uint64, written *tally) {
	type job struct {
		n           *node
		lift, vouch bool
	}
	var jobs []job
	lifts := false
	for _, i := range g.idx {
		lift := a.cfg.fencing && g.t.counters[i] < token
		vouch := a.quarantine > 0 && g.t.epochs[i] != epochTrusted
		if lift && written != nil && written.results[i].Outcome == OutcomeGranted {
			continue
		}
		if vouch || lift {
			jobs = append(jobs, job{a.c.nodes[i], lift, vouch})
			lifts = lifts || lift
		}
	}
	if len(jobs) == 0 {
		return
	}
	untrack := a.c.eng.Track()
	send := func() {
		defer untrack()
		if !lifts && a.shared.released.Load() {
			return // the release vouched where it deleted the key
		}
		var wg sync.WaitGroup
		for _, j := range jobs {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.timeout)
				defer cancel()
				a.followUp(ctx, j.n, token, j.lift, j.vouch)
			})
		}
		wg.Wait()
	}
	if lifts {
		go send()
		return
	}
	time.AfterFunc(vouchDelay, send)
}

// seedProposal is the seed, in microseconds, this attempt proposes for the
// counters it creates, and that seed + 1: the client's clock as the attempt
// begins. One proposal for all nodes lets their counters agree on a key's
// first use, which spares the write-back round trip; nodes whose clocks are
// within 25 ms of it take it (acquireScript). It is the clock itself, not a
// time before it: an attempt that begins after an earlier holder acquired
// then proposes a seed above that holder's token (docs/fencing.md,
// assumption C), however soon after it begins.
func seedProposal(now time.Time) (seed, next string) {
	s := now.UnixMicro()
	return strconv.FormatInt(s, 10), strconv.FormatInt(s+1, 10)
}

// retentionMs is the retention in milliseconds, as the scripts take it.
func retentionMs(cfg config) string {
	return strconv.FormatInt(cfg.retention.Milliseconds(), 10)
}
