package redlock

// The read/write lock: any number of readers or one writer, over the same
// quorum of nodes as the lock, with one script per node and operation
// (rwscripts.go). Its handles are Locks (Release, Extend, KeepAlive, Do's
// Lease), told apart by their rwHold.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// RWReadersKey returns the key (before any WithKeyPrefix) of the readers
// of the read/write lock name, a sorted set of their owner values by expiry:
// "{name}:readers", or "name:readers" when name already has a Redis Cluster
// hash tag. The writer is the key name itself, with the fencing counter and
// the amnesia guard epoch of a mutex of that name, so a writer is a holder
// of the mutex name: Client.Acquire on the name excludes readers and
// writers, but (not checking the readers) is not excluded by readers; take
// the write lock instead. The waiting writers' intents are "{name}:writers"
// (RWWritersKey).
func RWReadersKey(name string) string { return SiblingKey(name, ":readers") }

// RWWritersKey returns the key (before any WithKeyPrefix) of the waiting
// writers' intents of the read/write lock name, a sorted set by expiry:
// "{name}:writers", or "name:writers" when name has a hash tag.
func RWWritersKey(name string) string { return SiblingKey(name, ":writers") }

// rwKeys returns the read/write lock's five keys on a node, in the order
// the scripts take them, from its name (prefix included).
func rwKeys(w string) []string {
	return []string{w, fenceKey(w), epochKey(w), SiblingKey(w, ":readers"), SiblingKey(w, ":writers")}
}

// rwIntentMin is the shortest life of a waiting writer's intent on a node:
// a waiting Lock posts it again at each attempt, and the default retry
// policy's delays reach 250 ms.
const rwIntentMin = time.Second

// rwIntentTTL is how long a waiting writer's intent blocks new readers on
// a node after its last attempt there: the writer's TTL, at least
// rwIntentMin. A writer that crashed while waiting delays readers no
// longer than that.
func rwIntentTTL(ttl time.Duration) time.Duration { return max(ttl, rwIntentMin) }

// RWMutex is a read/write lock over the Client's nodes: any number of
// readers at once, or one writer alone (Redisson's RReadWriteLock, over
// independent masters instead of one). Get one with Client.RWMutex; it is
// safe for concurrent use and holds no state on the nodes until a lock is
// taken. Every holder must use the same name (and key prefix).
//
// Each node keeps the writer as a key and the readers as a set of owner
// values by expiry, and one script decides each grant atomically: a
// writer only where no reader is live and no writer holds, a reader only
// where no writer holds and none waits. A reader or a writer holds once a
// majority granted it, with the validity TTL − elapsed − drift, and any two
// majorities share a node, so a writer never holds while another holder
// does (while both are valid). A waiting Lock posts an intent on the nodes
// that refuses new readers, so a stream of readers cannot starve it; the
// intent expires, so a writer that crashed while waiting blocks readers
// for at most max(TTL, 1 s). A release that leaves the lock free for a
// writer (the writer's, or the last reader's) wakes the longest-waiting
// writer, ahead of readers that came before it, or when no writer waits,
// every waiting reader at once (a hint, as for Acquire). Writers' fencing
// tokens increase from writer to writer, above every earlier reader's; a
// reader's token is at least the last writer's and below the next
// writer's (RWLock). See docs/rwlock.md.
//
// It is not reentrant, and a reader cannot upgrade to a writer: a Lock
// called while the same process holds a read lock waits for that read lock
// to end.
type RWMutex struct {
	c    *Client
	name string
	opts []Option
}

// RWMutex returns the read/write lock name. opts (applied after the
// Client's, before each call's) are the options of its acquisitions and
// Do calls. It returns ErrInvalidArgument for an empty name, one whose keys
// would be longer than MaxKeyLen or have a brace but no hash tag, a bad
// option or WithMinHold (a read/write lock has no minimum hold); ErrClosed
// when the Client is closed.
func (c *Client) RWMutex(name string, opts ...Option) (*RWMutex, error) {
	if c.eng.Closed() {
		return nil, ErrClosed
	}
	cfg := c.cfg
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty read/write lock name", ErrInvalidArgument)
	}
	if _, err := checkKey(name, cfg.prefix); err != nil {
		return nil, err
	}
	if _, err := checkKey(RWWritersKey(name), cfg.prefix); err != nil {
		return nil, err
	}
	if cfg.minHold > 0 {
		return nil, fmt.Errorf("%w: a read/write lock has no minimum hold (WithMinHold)", ErrInvalidArgument)
	}
	return &RWMutex{c: c, name: name, opts: opts}, nil
}

// Name returns the read/write lock's name.
func (m *RWMutex) Name() string { return m.name }

// RWLock is a held read or write lock of an RWMutex: the Lock of one
// reader or of the writer. Every Lock method applies (Release, KeepAlive,
// Token, ValidUntil, Validity, …); Key is the RWMutex's name. Token is the
// fencing token: for a writer, greater than every earlier writer's and
// reader's; for a reader, the counter as it stands: the token of the last
// writer before it, or above it where a writer's attempt that failed, or a
// writer's grant that came late, moved a node's counter past it, but below
// every later writer's (0 when fencing is off, or no writer ever held the
// name within the retention). So a reader's token orders it between two
// writers; it does not name the last writer. docs/fencing.md says how a
// resource checks both.
type RWLock struct {
	*Lock
}

// rwHold is what a Lock of a read/write lock knows beyond a mutex's: Lock.keys
// holds the five keys of rwKeys.
type rwHold struct {
	mode string // "r": a reader, "w": the writer
}

// Shared reports whether the lock is a reader's (RLock, TryRLock, DoRead);
// false for the writer's.
func (h *RWLock) Shared() bool { return h.rw.mode == "r" }

// Extend is Lock.Extend on the reader's or writer's hold; it returns the new
// RWLock (ErrInvalidArgument for a nil ctx). A writer waiting does not stop
// a reader's extension: readers that hold keep holding (bound them with
// WithMaxHold in DoRead).
func (h *RWLock) Extend(ctx context.Context, ttl time.Duration) (*RWLock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	l, err := h.Lock.Extend(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return &RWLock{Lock: l}, nil
}

// RWLock returns the latest handle of the read/write lock the Lease keeps
// (DoRead, DoWrite, RWLock.KeepAlive); nil when the Lease keeps another kind
// of lock.
func (s *Lease) RWLock() *RWLock {
	l := s.Lock()
	if l.rw == nil {
		return nil
	}
	return &RWLock{Lock: l}
}

// RLock takes a read lock for ttl, waiting while a writer holds the lock
// or waits for it (retrying with the retry policy, as Client.Acquire; a
// release by the writer, when no other writer waits, cuts the delay of
// every waiting reader short). It returns the RWLock, or
// Acquire's errors with the RWMutex's name as the *QuorumError's Key:
// errors.Is(err, ErrTaken) when a writer held or waited in the last
// attempt, ErrNoQuorum in an outage, the context's error when ctx ended
// (all match ErrNotAcquired); ErrInvalidArgument for a nil ctx, a bad ttl
// or option, ErrClosed when the Client is closed.
func (m *RWMutex) RLock(ctx context.Context, ttl time.Duration, opts ...Option) (*RWLock, error) {
	return m.lockWith(ctx, "r", ttl, opts, true)
}

// TryRLock is RLock with a single attempt: it returns an error matching
// ErrTaken at once when a writer holds the lock or waits for it.
func (m *RWMutex) TryRLock(ctx context.Context, ttl time.Duration, opts ...Option) (*RWLock, error) {
	return m.lockWith(ctx, "r", ttl, opts, false)
}

// Lock takes the write lock for ttl, waiting while readers or another
// writer hold it. While it waits it posts its intent on the nodes, which
// refuse new readers until it holds, gives up, or the intent expires
// (max(ttl, 1 s) after its last attempt); the readers that hold keep their
// locks until they release or expire. A release by the last reader, or by
// the writer, cuts the retry delay of the longest-waiting writer short,
// ahead of any waiting reader. Errors are RLock's; ErrTaken when
// readers or a writer held the lock in the last attempt. A Lock that gives
// up withdraws its intent.
func (m *RWMutex) Lock(ctx context.Context, ttl time.Duration, opts ...Option) (*RWLock, error) {
	return m.lockWith(ctx, "w", ttl, opts, true)
}

// TryLock is Lock with a single attempt, and no intent: it returns an
// error matching ErrTaken at once when readers or a writer hold the lock.
func (m *RWMutex) TryLock(ctx context.Context, ttl time.Duration, opts ...Option) (*RWLock, error) {
	return m.lockWith(ctx, "w", ttl, opts, false)
}

// DoRead takes a read lock (as RLock, with the same Options), runs fn
// under it, kept with the HoldOptions of opts, with the rules of
// Client.Do: the lock is extended while fn runs, fn's ctx ends the moment
// the lock can no longer be trusted (lease.Err() says why), and it is
// released when fn returns or panics, or at the hold limit (WithMaxHold).
// lease.Token() is the reader's token. It returns RLock's error without
// running fn, else what Client.Do returns; ErrInvalidArgument for a nil fn
// or ctx.
func (m *RWMutex) DoRead(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...DoOption) error {
	return m.do(ctx, "r", ttl, fn, opts)
}

// DoWrite is DoRead for the write lock (as Lock): fn runs alone, and
// lease.Token() is the writer's token.
func (m *RWMutex) DoWrite(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...DoOption) error {
	return m.do(ctx, "w", ttl, fn, opts)
}

// rwConfig returns the options of one call of m: the Client's, m's, then
// opts.
func rwConfig[O DoOption](m *RWMutex, opts []O) (config, holdConfig, error) {
	cfg, hold := m.c.cfg, holdConfig{}
	if err := cfg.apply(m.opts); err != nil {
		return cfg, hold, err
	}
	if err := applyOptions(opts, &cfg, &hold); err != nil {
		return cfg, hold, err
	}
	if cfg.minHold > 0 {
		return cfg, hold, fmt.Errorf("%w: a read/write lock has no minimum hold (WithMinHold)", ErrInvalidArgument)
	}
	return cfg, hold, nil
}

func (m *RWMutex) do(ctx context.Context, mode string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts []DoOption) error {
	if ctx == nil {
		return errNilContext
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg, hold, err := rwConfig(m, opts)
	if err != nil {
		return err
	}
	if err := cfg.checkLock(ttl); err != nil {
		return err
	}
	if _, err := hold.intervalFor(ttl, cfg.driftFactor); err != nil {
		return err
	}
	l, err := m.acquire(ctx, mode, ttl, cfg, true)
	if err != nil {
		return err
	}
	return m.c.runLeased(ctx, l.Lock, fn, hold)
}

func (m *RWMutex) lockWith(ctx context.Context, mode string, ttl time.Duration, opts []Option, wait bool) (*RWLock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, _, err := rwConfig(m, opts)
	if err != nil {
		return nil, err
	}
	return m.acquire(ctx, mode, ttl, cfg, wait)
}

// acquire is the retry loop of RLock and Lock (acquireMulti's, with the
// same waits and rules), once the options were applied. A waiting writer
// posts its intent from its first attempt on, and withdraws it from every
// node when it returns (those that granted it dropped it already).
func (m *RWMutex) acquire(ctx context.Context, mode string, ttl time.Duration, cfg config, wait bool) (*RWLock, error) {
	if err := cfg.checkLock(ttl); err != nil {
		return nil, err
	}
	w, err := checkKey(m.name, cfg.prefix)
	if err != nil {
		return nil, err
	}
	c := m.c
	keys := rwKeys(w)
	if !wait {
		cfg.retry, cfg.outageLimit = NoRetry(), 0
	}
	kind := waitWriter
	if mode == "r" {
		kind = waitReader
	}
	intent := ""
	if mode == "w" && wait {
		if intent, err = cfg.owner(); err != nil || intent == "" {
			return nil, fmt.Errorf("%w: lock %s: owner generator: %v", ErrNotAcquired, keyText(m.name), err)
		}
	}
	if c.inc != nil && cfg.quarantine > 0 {
		c.inc.use(ttl) // as Acquire: read the nodes' incarnations, note the TTL
	}
	ctx, end := cfg.startCall(ctx, OpAcquire, m.name)
	var (
		calls  voteCalls
		last   *QuorumError
		waiter *lockWaiter
		posted bool
		out    = outage{c: c, cfg: cfg, ctx: ctx, key: m.name}
	)
	defer func() { waiter.leave() }()
	defer func() {
		if posted {
			m.unwait(ctx, keys, intent, cfg.timeoutFor(ttl), slices.Clone(calls.done))
		}
	}()
	for attempt := 1; ; attempt++ {
		calls.wait()
		done, open := c.eng.Begin(cfg.timeoutFor(ttl))
		if !open {
			end(nil, ErrClosed)
			return nil, ErrClosed
		}
		waiter.mark()
		started := time.Now()
		l, refused, err := m.attempt(ctx, mode, keys, intent, ttl, cfg, &calls)
		done()
		posted = posted || (intent != "" && refused)
		if err == nil {
			out.answered(started, l.nodes)
			l.attempts = attempt
			end(l, nil)
			return &RWLock{Lock: l}, nil
		}
		if !errors.As(err, &last) {
			end(nil, err)
			return nil, err
		}
		last.Attempts = attempt
		if cause := c.misconfigured(last); cause != nil {
			last.Cause = joinCause(last.Cause, cause)
			break
		}
		if over := out.record(started, last); over != nil {
			last.Cause = joinCause(last.Cause, over)
			break
		}
		if !c.waitRetry(ctx, cfg.retry, attempt, w, kind, &waiter, out.unannounced()) {
			break
		}
	}
	calls.wait()
	if err := callerEnded(ctx); err != nil && !errors.Is(last.Cause, err) {
		last.Cause = joinCause(last.Cause, err)
	}
	end(nil, last)
	return nil, last
}

// unwait withdraws a writer's intent from every node, in the background
// (Close waits for it), once the calls of pending (the last attempt's
// votes, each bounded by the per-node timeout) have ended: a straggler of
// that attempt that found the lock taken posts the intent when it runs,
// after the vote was decided. On the nodes that granted the writer it is
// gone already, and everywhere it expires by itself.
func (m *RWMutex) unwait(ctx context.Context, keys []string, intent string, timeout time.Duration, pending []<-chan struct{}) {
	c := m.c
	untrack := c.eng.Track()
	go func() {
		defer untrack()
		for _, done := range pending {
			<-done
		}
		var wg sync.WaitGroup
		for _, n := range c.nodes {
			wg.Go(func() {
				nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
				defer cancel()
				rwUnwaitScript.Run(nctx, n.Client, keys, intent)
			})
		}
		wg.Wait()
	}()
}

// rwAcq is one read/write lock acquisition attempt, shared with its late
// replies (as multiAcq is for a multi-key lock).
type rwAcq struct {
	c          *Client
	cfg        config
	ctx        context.Context
	name       string
	mode       string
	ttl        time.Duration
	owner      string
	timeout    time.Duration
	quarantine time.Duration // 0: guard off
	shared     *lockState
	decided    chan struct{}
	start      time.Time
	call       *nodecall.ScriptCall
	// per[i] is node i's refusal, written by its call before it returns.
	per []rwRefusal

	acq     *tally // the vote, once decided
	voteCtx context.Context
	unsure  bool // a node asked again (reask) did not answer

	mu    sync.Mutex
	state int32
}

// rwRefusal is what a node that refused a grant found.
type rwRefusal struct {
	writer           bool // a writer holds the key there
	readers, waiting int64
}

// attempt makes one attempt: vote, count (the amnesia guard), write the
// token back where needed, check the validity, hand out the Lock or clean
// up. It also reports whether some node did not grant it in time (a
// waiting writer's intent may then be posted there).
func (m *RWMutex) attempt(ctx context.Context, mode string, keys []string, intent string, ttl time.Duration, cfg config, calls *voteCalls) (*Lock, bool, error) {
	c := m.c
	owner, err := cfg.owner()
	if err == nil && owner == "" {
		return nil, false, fmt.Errorf("%w: acquire %s: the owner generator returned an empty value", ErrInvalidArgument, keyText(m.name))
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: acquire %s: owner generator: %w", ErrNotAcquired, keyText(m.name), err)
	}
	a := &rwAcq{
		c: c, cfg: cfg, ctx: ctx, name: m.name, mode: mode, ttl: ttl, owner: owner, timeout: cfg.timeoutFor(ttl),
		shared: newLockState(len(c.nodes)), per: make([]rwRefusal, len(c.nodes)),
	}
	if cfg.quarantine > 0 {
		a.quarantine = max(cfg.quarantine, ttl)
	}
	qMs, fence := "-1", "0"
	if a.quarantine > 0 {
		qMs = strconv.FormatInt(a.quarantine.Milliseconds(), 10)
	}
	if cfg.fencing {
		fence = "1"
	}
	seed, seedNext := seedProposal(time.Now())
	a.call = nodecall.NewScriptCall(rwAcquireScript, keys, owner, c.ttlArg.Arg(ttl), qMs, c.retentionArg.Arg(cfg.retention), fence, seed, seedNext,
		mode, intent, strconv.FormatInt(rwIntentTTL(ttl).Milliseconds(), 10)).ForNodes(len(c.nodes))
	a.start = time.Now()
	if c.eng.Queued {
		a.decided = make(chan struct{})
	}
	voteCtx := c.eng.WithQueueBy(ctx, a.start.Add(ttl-Drift(ttl, cfg.driftFactor)-a.timeout-minValidity), a.decided)
	a.voteCtx = voteCtx

	acq := c.acquireVote(voteCtx, ctx, a.timeout, a.start.Add(ttl), a.shared, calls, a.grant, a.late)
	acq = a.reask(acq, calls)
	a.acq = acq
	grants := a.count(acq)
	// A node that did not grant in time may have posted the intent, or
	// may still (a straggler that finds the lock taken).
	refused := acq.granted < len(c.nodes)
	ok := acq.granted >= c.quorum
	var (
		cause error
		token uint64
	)
	if ok && cfg.fencing {
		token, cause = a.fence(voteCtx, grants, calls)
		ok = cause == nil
	}
	acquiredAt := time.Now()
	a.start = cfg.mutant.AcquireStart(a.start, acquiredAt) // chaos mutant hook
	elapsed := acquiredAt.Sub(a.start)
	validity := validityLeft(ttl, elapsed, cfg.driftFactor)
	if ok && validity <= 0 {
		ok, cause = false, fmt.Errorf("validity time ran out: acquisition took %v of the %v ttl", elapsed.Round(time.Microsecond), ttl)
	}
	c.observeAttempt(ctx, cfg, m.name, ok, acq, elapsed, validity, ttl, cause)
	if !ok {
		a.decide(failed)
		calls.add(a.cleanUp(acq))
		cause = joinCause(cause, a.refusals(acq))
		if cause == nil {
			cause = callerEnded(ctx)
		}
		return nil, refused, newQuorumError(OpAcquire, m.name, c.quorum, acq, ErrNotAcquired, cause)
	}
	a.decide(succeeded)
	vouch := a.vouch(grants, token)
	a.shared.noteTTL(ttl)
	return &Lock{
		client: c, cfg: cfg, key: m.name, keys: keys, owner: owner, token: token,
		keyArgs: a.call.BoxedKeys(len(keys)), ownerArg: a.call.BoxedArg(0), ttl: ttl,
		acquiredAt: acquiredAt, validUntil: a.start.Add(ttl - Drift(ttl, cfg.driftFactor)),
		nodes: acq.results, state: a.shared, holdUntil: acquiredAt, vouch: vouch,
		rw: &rwHold{mode: mode},
	}, refused, nil
}

// grant runs the acquire script on node n: {1, counter, epoch state, age}
// for a grant (and the node's marker id when the epoch is not trusted),
// {-1, writer, readers, waiting} for a refusal (recorded in a.per). A grant
// is then judged by the node's incarnation as a mutex's is
// (Client.nodeVote).
func (a *rwAcq) grant(ctx context.Context, n *node) reply {
	snap := a.c.incSnapshot(n)
	v, err := a.call.Run(ctx, n).Result()
	if err != nil {
		return reply{Err: err, Shed: errors.Is(err, nodecall.ErrOverdue)}
	}
	vs, _ := v.([]any)
	bad := reply{Err: fmt.Errorf("redlock: unexpected read/write lock acquire reply %v", v)}
	if len(vs) != 4 && len(vs) != 5 {
		return bad
	}
	code, _ := vs[0].(int64)
	switch code {
	case -1:
		if len(vs) != 4 {
			return bad
		}
		w, _ := vs[1].(string)
		rd, _ := vs[2].(int64)
		wt, _ := vs[3].(int64)
		a.per[n.Idx] = rwRefusal{writer: w != "", readers: rd, waiting: wt}
		return reply{Code: codeTaken}
	case 1:
	default:
		return bad
	}
	var res [3]int64
	for i := range res {
		x, ok := vs[1+i].(int64)
		if !ok {
			return bad
		}
		res[i] = x
	}
	if res[0] < 0 {
		return bad
	}
	var mark string
	if len(vs) == 5 {
		var ok bool
		if mark, ok = vs[4].(string); !ok {
			return bad
		}
	}
	r := reply{Code: codeApplied, Counter: uint64(res[0]), Epoch: res[1]}
	if r.Epoch == epochQuarantined || r.Epoch == epochNew {
		r.Code, r.Left = codeQuarantined, a.quarantine-time.Duration(res[2])*time.Millisecond
	}
	// The script reads the marker with every grant whose epoch is not
	// trusted ("" when it is missing).
	return a.c.nodeVote(a.quarantine, n, snap, r, mark, r.Epoch != epochTrusted)
}

// reask settles a split first use as acquisition.reask does: several
// attempts made the first use of the name at once, this one got a majority
// of grants on epochs created just now and "taken" elsewhere; the others
// fail and take their holds back, so it asks those nodes again, with the
// same owner value, up to reaskRounds times within one per-node timeout.
func (a *rwAcq) reask(acq *tally, calls *voteCalls) *tally {
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

// revote is one round of reask (acquisition.revote): the nodes that said
// "taken" in prev are asked again, the others' answers in prev stand.
func (a *rwAcq) revote(prev *tally, calls *voteCalls) *tally {
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

// count applies the amnesia guard's first-use rule (acquisition.countVotes)
// to the nodes whose incarnation is unknown (grant applied the per-node
// rule): fresh votes count when the name is new to the cluster. It returns
// every node that granted in time, counted or not.
func (a *rwAcq) count(acq *tally) []int {
	if acq.brandNew() && !a.unsure {
		for i := range acq.results {
			if acq.results[i].Outcome == OutcomeQuarantined && acq.epochs[i] == epochNew {
				acq.results[i].Outcome, acq.results[i].QuarantineLeft = OutcomeGranted, 0
				acq.granted++
			}
		}
	}
	var grants []int
	for i, r := range acq.results {
		switch r.Outcome {
		case OutcomeQuarantined:
			if acq.epochs[i] == epochNodeQuarantined {
				grants = append(grants, i) // logged once, when it entered its quarantine
				continue
			}
			a.cfg.logger.Warn("redlock: vote not counted: node quarantined by the amnesia guard",
				"key", keyAttr(a.name), "node", r.Node, "quarantine_left", r.QuarantineLeft)
			fallthrough
		case OutcomeGranted:
			grants = append(grants, i)
		}
	}
	return grants
}

// fence returns the token, the highest counter among the grants, and
// unless a majority of them returned it, writes it back (owner-checked,
// vouching where needed), deciding at a majority of nodes that hold it. A
// reader's write-back matters as much as a writer's: it is what keeps the
// next writer's token above this reader's.
func (a *rwAcq) fence(voteCtx context.Context, grants []int, calls *voteCalls) (uint64, error) {
	acq := a.c.nodes
	var token uint64 // the highest counter among the grants
	for _, i := range grants {
		token = max(token, a.acq.counters[i])
	}
	has := make([]bool, len(acq))
	isGrant := make([]bool, len(acq))
	agreed := 0
	for _, i := range grants {
		isGrant[i] = true
		if a.acq.counters[i] == token {
			has[i] = true
			agreed++
		}
	}
	if agreed >= a.c.quorum {
		return token, nil
	}
	call := a.fenceCall(token, a.quarantine > 0)
	t, done := a.c.voteQuorum(context.WithoutCancel(voteCtx), a.timeout, func(ctx context.Context, n *node) reply {
		switch {
		case !isGrant[n.Idx]:
			return reply{Code: codeNotHeld}
		case has[n.Idx]:
			return reply{Code: codeApplied}
		}
		code, err := call.Run(ctx, n).Int64()
		return reply{Code: code, Err: err}
	}, nil)
	calls.add(done)
	if t.granted < a.c.quorum {
		return 0, fmt.Errorf("fencing write-back: the token is on %d of %d nodes needed", t.granted, a.c.quorum)
	}
	return token, nil
}

// fenceCall is rwFenceScript's call: the token ("0" for none), vouching on
// or off.
func (a *rwAcq) fenceCall(token uint64, vouch bool) *nodecall.ScriptCall {
	v := "0"
	if vouch {
		v = "1"
	}
	keys := a.call.Keys()
	return nodecall.NewScriptCallBoxed(rwFenceScript, keys, a.call.BoxedKeys(len(keys)),
		a.call.BoxedArg(0), strconv.FormatUint(token, 10), v, retentionMs(a.cfg), a.mode).ForNodes(len(a.c.nodes))
}

// vouch sends, in the background, what the grants still need once the
// lock is held: the token to those whose counter is below it, and, with the
// amnesia guard, vouching to those whose epoch is not trusted; Close waits
// for it. It reports whether the Lock's release must do the same where it
// deletes (it may overtake these writes, and a late grant gets none but the
// release's): not when every node granted in time, trusted, with the token.
func (a *rwAcq) vouch(grants []int, token uint64) bool {
	var need []*node
	for _, i := range grants {
		untrusted := a.quarantine > 0 && a.acq.epochs[i] != epochTrusted
		if untrusted || (a.cfg.fencing && a.acq.counters[i] < token) {
			need = append(need, a.c.nodes[i])
		}
	}
	if len(need) == 0 {
		return len(grants) < len(a.c.nodes) && (a.quarantine > 0 || a.cfg.fencing)
	}
	call := a.fenceCall(token, a.quarantine > 0)
	untrack := a.c.eng.Track()
	go func() {
		defer untrack()
		var wg sync.WaitGroup
		for _, n := range need {
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.timeout)
				defer cancel()
				call.Run(ctx, n)
			})
		}
		wg.Wait()
	}()
	return true
}

// refusals says what the nodes that refused found: a writer holding, live
// readers, writers waiting; nil when none refused.
func (a *rwAcq) refusals(acq *tally) error {
	var writer, readers, waiting int
	var most, mostWaiting int64
	for i, r := range acq.results {
		if r.Outcome != OutcomeTaken {
			continue
		}
		p := a.per[i]
		if p.writer {
			writer++
		}
		if p.readers > 0 {
			readers++
			most = max(most, p.readers)
		}
		if p.waiting > 0 {
			waiting++
			mostWaiting = max(mostWaiting, p.waiting)
		}
	}
	if writer+readers+waiting == 0 {
		return nil
	}
	var parts []string
	if writer > 0 {
		parts = append(parts, fmt.Sprintf("a writer holds it on %d nodes", writer))
	}
	if readers > 0 {
		parts = append(parts, fmt.Sprintf("up to %d readers hold it on %d nodes", most, readers))
	}
	if waiting > 0 && a.mode == "r" {
		parts = append(parts, fmt.Sprintf("up to %d writers wait on %d nodes", mostWaiting, waiting))
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

// decide records how the attempt ended (multiAcq.decide).
func (a *rwAcq) decide(st int32) {
	a.mu.Lock()
	a.state = st
	a.mu.Unlock()
	if a.decided != nil {
		close(a.decided)
	}
}

// late receives a reply that arrived after the vote was decided
// (multiAcq.late): after a failure a grant, or a call sent but not
// answered, gets the owner-checked undo; after a success Release deletes
// there once the call has returned.
func (a *rwAcq) late(r reply) {
	if r.Err != nil && errors.Is(r.Err, nodecall.ErrNotSent) {
		return
	}
	if r.Err == nil && r.Code == codeTaken && a.c.nodes[r.Idx].NoResend {
		return
	}
	a.mu.Lock()
	st := a.state
	a.mu.Unlock()
	if st != failed {
		return // undecided: the clean-up, sent after decide, reaches it
	}
	ctx, cancel := a.c.eng.CleanupContext(a.ctx, time.Now().Add(a.ttl), a.timeout)
	defer cancel()
	a.undo().Run(ctx, a.c.nodes[r.Idx])
}

// undo is the owner-checked delete of the attempt's hold, telling no
// waiter.
func (a *rwAcq) undo() *nodecall.ScriptCall {
	keys := a.call.Keys()
	return nodecall.NewScriptCallBoxed(rwReleaseScript, keys, a.call.BoxedKeys(len(keys)), a.call.BoxedArg(0), a.mode, "undo", "0")
}

// cleanUp deletes the failed attempt's hold on every node that may have it
// (multiAcq.cleanUp).
func (a *rwAcq) cleanUp(acq *tally) <-chan struct{} {
	c := a.c
	rel := a.undo().ForNodes(len(c.nodes))
	_, done := c.voteAll(c.eng.WithQueueBy(context.WithoutCancel(a.ctx), time.Now().Add(a.ttl), nil), a.timeout, func(ctx context.Context, n *node) reply {
		ended, unsent := a.shared.calls.returned(n.Idx)
		switch {
		case unsent:
			return reply{Err: errShed}
		case acq.results[n.Idx].Outcome == OutcomeTaken && n.NoResend:
			return reply{Code: codeTaken}
		case !ended:
			return reply{Err: errShed} // late deletes when the reply comes
		}
		n.Enter()
		defer n.Exit()
		code, err := rel.Run(ctx, n).Int64()
		return reply{Code: code, Err: err}
	})
	return done
}

// rwReleaseCall is Release's call for a read/write lock, with skip the
// channels the wake-up passes over (releaseCall). With vouch, it does the
// acquisition's follow-up writes where it deletes.
func (l *Lock) rwReleaseCall(skip []any) *nodecall.ScriptCall {
	v := "0"
	if l.vouch {
		v = "1"
	}
	return releaseCall(rwReleaseScript, l.keys, l.keyArgs, skip, l.ownerArg, l.rw.mode, v, strconv.FormatUint(l.token, 10))
}

// rwExtendCall is Extend's call for a read/write lock.
func (l *Lock) rwExtendCall(ttl time.Duration) *nodecall.ScriptCall {
	c := l.client
	return nodecall.NewScriptCallBoxed(rwExtendScript, l.keys, l.keyArgs, l.ownerArg, c.ttlArg.Arg(ttl), c.retentionArg.Arg(l.cfg.retention), l.rw.mode)
}
