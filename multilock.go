package redlock

// The multi-key lock: K keys taken all or none, by one script per node.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// MaxMultiKeys is the most keys one multi-key lock takes (AcquireMulti): each
// key adds three keys to the one script every node runs atomically, and a
// script that long blocks the node's other commands while it runs.
const MaxMultiKeys = 64

// MultiLock is an acquired multi-key lock: every one of its keys is held by
// the same owner value on a majority of the nodes, from one acquisition. It
// is an immutable handle, safe to share between goroutines; Extend returns a
// new one. Release, Extend and KeepAlive act on all its keys at once.
type MultiLock struct {
	lock *Lock
}

// multiKeys is what a Lock of a multi-key lock knows beyond a single key's:
// Lock.keys holds each key's lock key, counter and epoch, in turn.
type multiKeys struct {
	names  []string // the keys as the caller named them, in the caller's order
	tokens []uint64 // each key's fencing token, in that order
}

// Keys returns the keys as passed to AcquireMulti, in that order.
func (m *MultiLock) Keys() []string { return slices.Clone(m.lock.multi.names) }

// Token returns key's fencing token: it is greater than the token of every
// earlier holder of that key, whether that holder took it alone (Acquire) or
// with others (AcquireMulti). Pass each resource its own key's token. It
// returns false for a key that is not one of the lock's; the token is 0
// when fencing is off.
func (m *MultiLock) Token(key string) (uint64, bool) {
	i := slices.Index(m.lock.multi.names, key)
	if i < 0 {
		return 0, false
	}
	return m.lock.multi.tokens[i], true
}

// Tokens returns the keys' fencing tokens in the order of Keys.
func (m *MultiLock) Tokens() []uint64 { return slices.Clone(m.lock.multi.tokens) }

// Owner returns the random owner value stored in every key. Treat it as a
// secret: whoever knows it can release the lock.
func (m *MultiLock) Owner() string { return m.lock.owner }

// TTL returns the TTL the keys were set (or last extended) with.
func (m *MultiLock) TTL() time.Duration { return m.lock.ttl }

// AcquiredAt returns when the lock was handed out (for an extended lock,
// when the extension was), as Lock.AcquiredAt.
func (m *MultiLock) AcquiredAt() time.Time { return m.lock.acquiredAt }

// ValidUntil returns the validity deadline, as Lock.ValidUntil: the start of
// the attempt (or extension) plus TTL minus the drift allowance.
func (m *MultiLock) ValidUntil() time.Time { return m.lock.ValidUntil() }

// Validity returns the validity time left, as Lock.Validity: zero or
// negative once the deadline passed or Release was called on any handle of
// the lock, or a Lease keeping it declared it lost.
func (m *MultiLock) Validity() time.Duration { return m.lock.Validity() }

// Attempts returns how many attempts the acquisition took.
func (m *MultiLock) Attempts() int { return m.lock.attempts }

// Nodes returns each node's outcome in the attempt (or extension) that
// produced this handle: granted means the node set (or extended) every key.
func (m *MultiLock) Nodes() []NodeResult { return m.lock.Nodes() }

// Release deletes, on every node, each key that still holds this lock's
// owner value, as Lock.Release does for one key, and tells each key's
// longest waiter. It returns nil when a majority answered and on none of
// them a key was not ours; a *QuorumError wrapping ErrNotHeld when a
// majority answered that not every key was ours (expired or taken), one
// wrapping ErrNoQuorum when fewer than a majority answered; ErrClosed after
// Close. Later calls return ErrNotHeld without a round trip.
func (m *MultiLock) Release(ctx context.Context) error { return m.lock.Release(ctx) }

// Extend makes every key live at least ttl more and returns the new handle,
// as Lock.Extend; a node applies it only if it holds every key with this
// lock's owner value (all or none), and the extension succeeds only if a
// majority did. Unlike Lock.Extend it does not put keys back on nodes that
// lost them. Errors are Lock.Extend's.
func (m *MultiLock) Extend(ctx context.Context, ttl time.Duration) (*MultiLock, error) {
	l, err := m.lock.Extend(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return &MultiLock{lock: l}, nil
}

// KeepAlive keeps the lock alive in the background as Lock.KeepAlive does
// (same options and errors) and returns the Lease that does it: its context
// ends when an extension of all the keys fails or the validity runs out.
// The Lease's Key is the keys joined by ",", and its Token the first key's:
// take every key's token from Token or Tokens. The Lease's context is not
// reentrant for Acquire of one of the keys.
func (m *MultiLock) KeepAlive(ctx context.Context, opts ...HoldOption) (*Lease, error) {
	return m.lock.KeepAlive(ctx, opts...)
}

// MultiLock returns the latest handle of the multi-key lock the Lease keeps
// (DoMulti, MultiLock.KeepAlive), whose Token gives each key's fencing
// token; nil when the Lease keeps a lock of one key.
func (s *Lease) MultiLock() *MultiLock {
	l := s.Lock()
	if l.multi == nil {
		return nil
	}
	return &MultiLock{lock: l}
}

// DoMulti is Do for a multi-key lock: it acquires every one of keys for ttl
// (as AcquireMulti, with the same options, plus WithExtendInterval and
// WithMaxHold), runs fn with the Lease that keeps all of them (as
// MultiLock.KeepAlive), and releases them when fn returns or panics, or
// when the hold limit passes, whichever is first. The Lease's Token is the
// first key's: take each key's from lease.MultiLock().Token.
//
// It returns AcquireMulti's error, without running fn, when the keys were
// not acquired; ErrInvalidArgument for a nil fn or an extension interval
// not below the validity, before contacting any node; otherwise Do's
// errors: one wrapping the Lease's cause (ErrLockLost, ErrHoldLimit) and
// fn's error when the lock ended before fn returned, else fn's error.
func (c *Client) DoMulti(ctx context.Context, keys []string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...DoOption) (err error) {
	if ctx == nil {
		return errNilContext
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg, hold := c.cfg, holdConfig{}
	if err := applyOptions(opts, &cfg, &hold); err != nil {
		return err
	}
	ctx, end := cfg.startCall(ctx, OpDo, strings.Join(keys, ","))
	defer func() { end(nil, err) }()
	if err := checkTTL(ttl, cfg.driftFactor, cfg.timeoutFor(ttl)); err != nil {
		return err
	}
	if _, err := hold.intervalFor(ttl, cfg.driftFactor); err != nil {
		return err
	}
	m, err := c.acquireMultiWith(ctx, keys, ttl, cfg)
	if err != nil {
		return err
	}
	return c.runLeased(ctx, m.lock, fn, hold)
}

// KeysTakenError is the cause, in a *QuorumError of a failed AcquireMulti or
// TryAcquireMulti, that says which keys were held elsewhere in the last
// attempt, on which nodes, and by whom. Get it with errors.As.
type KeysTakenError struct {
	// Keys lists the keys that some node reported held, in the order they
	// were passed.
	Keys []TakenKey
}

// TakenKey is one key of a multi-key lock that nodes reported held.
type TakenKey struct {
	Key     string      // as the caller named it
	Holders []KeyHolder // one per node that reported it held, in node order
}

// KeyHolder is one node's holder of a key.
type KeyHolder struct {
	Node string // the node's name
	// Holder is the first 8 bytes of the holder's owner value (the owner
	// value is a secret: whoever knows it can release the lock), or "" for a
	// key of another type than a lock's. Keys held by one lock show the same
	// Holder; compare it with the start of Lock.Owner or MultiLock.Owner.
	Holder string
}

// holderLen is how much of an owner value a KeyHolder shows.
const holderLen = 8

// Error lists the held keys, with the nodes and holders of each.
func (e *KeysTakenError) Error() string {
	var b strings.Builder
	b.WriteString("keys held elsewhere:")
	for i, k := range e.Keys {
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s on", keyText(k.Key))
		for j, h := range k.Holders {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " %s by %q", h.Node, h.Holder)
		}
	}
	return b.String()
}

// AcquireMulti takes the lock on every one of keys for ttl, all or none:
// each node runs one script that sets every key if every key is free there,
// else none, and the lock is acquired when a majority of the nodes set them
// all quickly enough to leave validity (as Acquire: TTL − elapsed − drift).
// Two multi-key locks (or a multi-key lock and single-key ones) on
// overlapping keys therefore never deadlock, whatever the order of their
// keys. Each key has its own fencing token (MultiLock.Token), in the same
// sequence as the key's single-key locks, and its own amnesia guard epoch.
// It retries as Acquire does while a key is held elsewhere, and a release
// of the first key the last attempt found held cuts a retry delay short.
//
// It returns ErrInvalidArgument for no keys, more than MaxMultiKeys, an
// empty, too long or repeated key, a ttl Acquire refuses, WithMinHold, or,
// when a node is a Redis Cluster (*redis.ClusterClient), keys that are not
// all in one hash slot (give them one hash tag: "{accounts}:alice",
// "{accounts}:bob"); ErrClosed on a closed Client. Otherwise, on failure, a
// *QuorumError as Acquire's, whose Cause, when a node found a key held, is
// a *KeysTakenError (errors.As); no key of its attempts is left behind.
// It is not reentrant: a Lease's context does not hold its keys for it.
func (c *Client) AcquireMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*MultiLock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg := c.cfg
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	return c.acquireMultiWith(ctx, keys, ttl, cfg)
}

// acquireMultiWith is AcquireMulti once its options are applied.
func (c *Client) acquireMultiWith(ctx context.Context, keys []string, ttl time.Duration, cfg config) (*MultiLock, error) {
	mk, all, err := c.checkMulti(keys, ttl, cfg)
	if err != nil {
		return nil, err
	}
	joined := strings.Join(mk.names, ",")
	ctx, end := cfg.startCall(ctx, OpAcquire, joined)
	l, err := c.acquireMulti(ctx, mk, all, joined, ttl, cfg)
	end(l, err)
	if err != nil {
		return nil, err
	}
	return &MultiLock{lock: l}, nil
}

// TryAcquireMulti is AcquireMulti with a single attempt: it returns
// ErrNotAcquired at once when a key is held elsewhere.
func (c *Client) TryAcquireMulti(ctx context.Context, keys []string, ttl time.Duration, opts ...Option) (*MultiLock, error) {
	return c.AcquireMulti(ctx, keys, ttl, slices.Concat(opts, tryOnce)...)
}

// checkMulti checks AcquireMulti's arguments before any node is asked, and
// returns the keys' names and, for the scripts, every key's lock key,
// counter and epoch in turn.
func (c *Client) checkMulti(keys []string, ttl time.Duration, cfg config) (*multiKeys, []string, error) {
	switch {
	case len(keys) == 0:
		return nil, nil, fmt.Errorf("%w: no keys to lock", ErrInvalidArgument)
	case len(keys) > MaxMultiKeys:
		return nil, nil, fmt.Errorf("%w: %d keys, more than the %d a multi-key lock takes (MaxMultiKeys)", ErrInvalidArgument, len(keys), MaxMultiKeys)
	case cfg.minHold > 0:
		return nil, nil, fmt.Errorf("%w: a multi-key lock has no minimum hold (WithMinHold)", ErrInvalidArgument)
	}
	if err := checkTTL(ttl, cfg.driftFactor, cfg.timeoutFor(ttl)); err != nil {
		return nil, nil, err
	}
	if err := cfg.checkRetention(ttl); err != nil {
		return nil, nil, err
	}
	all := make([]string, 0, 3*len(keys))
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		name, err := checkKey(k, cfg.prefix)
		if err != nil {
			return nil, nil, fmt.Errorf("key %d: %w", i, err)
		}
		if j, dup := seen[name]; dup {
			return nil, nil, fmt.Errorf("%w: key %d (%s) repeats key %d", ErrInvalidArgument, i, keyText(k), j)
		}
		seen[name] = i
		all = append(all, name, fenceKey(name), epochKey(name))
	}
	for _, n := range c.nodes {
		if _, ok := n.Client.(*redis.ClusterClient); ok {
			if err := oneSlot(keys, all, n.Name); err != nil {
				return nil, nil, err
			}
		}
	}
	return &multiKeys{names: slices.Clone(keys), tokens: make([]uint64, len(keys))}, all, nil
}

// oneSlot checks that the keys' lock keys (all[3i]) share one Redis Cluster
// hash slot: one script sets them all, and a cluster runs a script on the
// master of one slot.
func oneSlot(keys, all []string, node string) error {
	first := clusterSlot(all[0])
	for i := 1; i < len(keys); i++ {
		if s := clusterSlot(all[3*i]); s != first {
			return fmt.Errorf("%w: keys %s (hash slot %d) and %s (hash slot %d) are in different hash slots of the Redis Cluster node %s: "+
				"a multi-key lock sets all its keys in one script, which a cluster runs on one slot; give the keys one hash tag, "+
				"e.g. \"{accounts}:alice\" and \"{accounts}:bob\" (only the part in braces is hashed)",
				ErrInvalidArgument, keyText(keys[0]), first, keyText(keys[i]), s, node)
		}
	}
	return nil
}

// clusterSlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag, or of the whole key when it has none, modulo 16384.
func clusterSlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// acquireMulti is AcquireMulti's retry loop around multiAttempt, the loop
// of Acquire (acquire.go) with the same waits and rules.
func (c *Client) acquireMulti(ctx context.Context, mk *multiKeys, all []string, joined string, ttl time.Duration, cfg config) (*Lock, error) {
	var (
		calls voteCalls
		last  *QuorumError
		w     *lockWaiter
		out   = outage{c: c, cfg: cfg, ctx: ctx, key: joined}
		wait  = all[0] // the lock key whose release wakes this call
	)
	defer func() { w.leave() }()
	if c.inc != nil && cfg.quarantine > 0 {
		c.inc.use(ttl) // as Acquire: read the nodes' incarnations, note the TTL
	}
	for attempt := 1; ; attempt++ {
		calls.wait()
		done, open := c.eng.Begin(cfg.timeoutFor(ttl))
		if !open {
			return nil, ErrClosed
		}
		w.mark()
		started := time.Now()
		l, held, err := c.multiAttempt(ctx, mk, all, joined, ttl, cfg, &calls)
		done()
		if err == nil {
			out.answered(started, l.nodes)
			l.attempts = attempt
			return l, nil
		}
		if !errors.As(err, &last) {
			return nil, err
		}
		last.Attempts = attempt
		if w == nil && held >= 0 {
			wait = all[3*held]
		}
		if cause := c.misconfigured(last); cause != nil {
			last.Cause = joinCause(last.Cause, cause)
			break
		}
		if over := out.record(started, last); over != nil {
			last.Cause = joinCause(last.Cause, over)
			break
		}
		if !c.waitRetry(ctx, cfg.retry, attempt, wait, waitLock, &w, out.unannounced()) {
			break
		}
	}
	calls.wait()
	if err := callerEnded(ctx); err != nil {
		last.Cause = joinCause(last.Cause, err)
	}
	return nil, last
}

// multiGrant is one node's answer to a multi-key acquisition, beyond the
// reply the vote counts: per key, its counter, epoch state and epoch age
// (a grant), or its holder when held ("" when free).
type multiGrant struct {
	counters []uint64
	epochs   []int64
	ages     []int64
	holders  []string
	held     []bool
}

// multiAcq is one multi-key acquisition attempt, shared with its late
// replies (as acquisition is for one key).
type multiAcq struct {
	c          *Client
	cfg        config
	ctx        context.Context
	mk         *multiKeys
	ttl        time.Duration
	owner      string
	timeout    time.Duration
	quarantine time.Duration // 0: guard off
	shared     *lockState
	decided    chan struct{}
	start      time.Time
	call       *nodecall.ScriptCall
	// per[i] is node i's answer, written by its call before it returns:
	// read only for the replies the vote recorded.
	per []multiGrant

	mu    sync.Mutex
	state int32
	early []reply
}

// multiAttempt makes one attempt: vote, count (the amnesia guard per node,
// then per key), write the tokens back where needed, check the validity,
// hand out the Lock or clean up. On failure it also returns the index of
// the first key found held (-1: none).
func (c *Client) multiAttempt(ctx context.Context, mk *multiKeys, all []string, joined string, ttl time.Duration, cfg config, calls *voteCalls) (*Lock, int, error) {
	owner, err := cfg.owner()
	if err == nil && owner == "" {
		return nil, -1, fmt.Errorf("%w: acquire %s: the owner generator returned an empty value", ErrInvalidArgument, keyText(joined))
	}
	if err != nil {
		return nil, -1, fmt.Errorf("%w: acquire %s: owner generator: %w", ErrNotAcquired, keyText(joined), err)
	}
	a := &multiAcq{
		c: c, cfg: cfg, ctx: ctx, mk: mk, ttl: ttl, owner: owner, timeout: cfg.timeoutFor(ttl),
		shared: newLockState(len(c.nodes)), per: make([]multiGrant, len(c.nodes)),
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
	a.call = nodecall.NewScriptCall(multiAcquireScript, all, owner, c.ttlArg.Arg(ttl), qMs, c.retentionArg.Arg(cfg.retention), fence, seed, seedNext).ForNodes(len(c.nodes))
	a.start = time.Now()
	if c.eng.Queued {
		a.decided = make(chan struct{})
	}
	voteCtx := c.eng.WithQueueBy(ctx, a.start.Add(ttl-Drift(ttl, cfg.driftFactor)-a.timeout-minValidity), a.decided)

	acq := a.vote(voteCtx, calls)
	grants := a.count(acq)
	ok := acq.granted >= c.quorum
	var cause error
	tokens := make([]uint64, len(mk.names))
	if ok && cfg.fencing {
		cause = a.fence(voteCtx, acq, grants, tokens, calls)
		ok = cause == nil
	}
	acquiredAt := time.Now()
	a.start = cfg.mutant.AcquireStart(a.start, acquiredAt) // chaos mutant hook
	elapsed := acquiredAt.Sub(a.start)
	validity := validityLeft(ttl, elapsed, cfg.driftFactor)
	if ok && validity <= 0 {
		ok, cause = false, fmt.Errorf("validity time ran out: acquisition took %v of the %v ttl", elapsed.Round(time.Microsecond), ttl)
	}
	c.observeAttempt(ctx, cfg, joined, ok, acq, elapsed, validity, ttl, cause)
	if !ok {
		a.decide(failed)
		calls.add(a.cleanUp(acq))
		held, taken := a.taken(acq)
		cause = joinCause(cause, taken)
		if cause == nil {
			cause = callerEnded(ctx)
		}
		return nil, held, newQuorumError(OpAcquire, joined, c.quorum, acq, ErrNotAcquired, cause)
	}
	a.decide(succeeded)
	vouch := a.vouch(acq, grants)
	a.shared.noteTTL(ttl)
	return &Lock{
		client: c, cfg: cfg, key: joined, keys: all, owner: owner, token: tokens[0],
		keyArgs: a.call.BoxedKeys(len(all)), ownerArg: a.call.BoxedArg(0), ttl: ttl,
		acquiredAt: acquiredAt, validUntil: a.start.Add(ttl - Drift(ttl, cfg.driftFactor)),
		nodes: acq.results, state: a.shared, holdUntil: acquiredAt, vouch: vouch,
		multi: &multiKeys{names: mk.names, tokens: tokens},
	}, -1, nil
}

// vote asks every node to set every key (acquireVote, as acquisition.vote).
func (a *multiAcq) vote(voteCtx context.Context, calls *voteCalls) *tally {
	return a.c.acquireVote(voteCtx, a.ctx, a.timeout, a.start.Add(a.ttl), a.shared, calls, a.grant, a.late)
}

// grant runs the script on node n and reads its answer into a.per[n.Idx].
// The reply the vote counts is granted when every key's epoch is trusted
// (or aged), quarantined otherwise: new when every untrusted key's epoch is
// new (the first use of those keys may make them count, see count). Then
// the node's incarnation decides as for a single key (Client.nodeVote): a
// verified node's grant counts at once (once the node is old) however new
// its keys, a quarantined or changed node's never.
func (a *multiAcq) grant(ctx context.Context, n *node) reply {
	snap := a.c.incSnapshot(n)
	v, err := a.call.Run(ctx, n).Result()
	if err != nil {
		// Not sent when it gave up its wait for a connection (as
		// acquisition.grant): the node is left pending.
		return reply{Err: err, Shed: errors.Is(err, nodecall.ErrOverdue)}
	}
	vs, _ := v.([]any)
	k := len(a.mk.names)
	bad := reply{Err: fmt.Errorf("redlock: unexpected multi-key acquire reply %v", v)}
	if len(vs) == 0 {
		return bad
	}
	code, _ := vs[0].(int64)
	g := &a.per[n.Idx]
	switch code {
	case -1:
		g.holders, g.held = make([]string, k), make([]bool, k)
		for i := 1; i+1 < len(vs); i += 2 {
			j, _ := vs[i].(int64)
			o, _ := vs[i+1].(string)
			if j < 1 || int(j) > k {
				return bad
			}
			g.held[j-1], g.holders[j-1] = true, o
		}
		return reply{Code: codeTaken}
	case 1:
		if len(vs) != 1+3*k && len(vs) != 2+3*k {
			return bad
		}
	default:
		return bad
	}
	var mark string
	if len(vs) == 2+3*k {
		var ok bool
		if mark, ok = vs[1+3*k].(string); !ok {
			return bad
		}
	}
	g.counters, g.epochs, g.ages = make([]uint64, k), make([]int64, k), make([]int64, k)
	r := reply{Code: codeApplied, Epoch: epochTrusted}
	hasMark := false // the script read the marker: some epoch is not trusted
	for i := range k {
		c, ok1 := vs[1+3*i].(int64)
		st, ok2 := vs[2+3*i].(int64)
		age, ok3 := vs[3+3*i].(int64)
		if !ok1 || !ok2 || !ok3 || c < 0 {
			return bad
		}
		g.counters[i], g.epochs[i], g.ages[i] = uint64(c), st, age
		hasMark = hasMark || st != epochTrusted
		switch st {
		case epochQuarantined:
			r.Code, r.Epoch = codeQuarantined, epochQuarantined
		case epochNew:
			if r.Epoch != epochQuarantined {
				r.Code, r.Epoch = codeQuarantined, epochNew
			}
		}
		if st == epochQuarantined || st == epochNew {
			left := a.quarantine - time.Duration(age)*time.Millisecond
			if r.Left == 0 || left > r.Left {
				r.Left = left
			}
		}
	}
	if mark != "" && !hasMark {
		return bad
	}
	r.Counter = g.counters[0]
	return a.c.nodeVote(a.quarantine, n, snap, r, mark, hasMark)
}

// count applies the amnesia guard per key to the nodes whose incarnation
// is unknown (grant applied the per-node rule: a verified node's grant is
// counted already, a quarantined node's never counts): such a node's grant
// counts when every key's epoch there is trusted or aged, or new for a key
// that is new to the cluster (every node that answered reported it new, at
// least a majority of them: the first-use rule of acquisition.countVotes,
// key by key). It marks those nodes granted in acq and returns every node
// that set the keys in time, counted or not.
func (a *multiAcq) count(acq *tally) []int {
	k := len(a.mk.names)
	brandNew := make([]bool, k)
	for j := range k {
		fresh, others := 0, 0
		for i, r := range acq.results {
			switch {
			case r.Outcome == OutcomeQuarantined && acq.epochs[i] == epochNodeQuarantined:
				// A node that may have lost its data: neither new nor
				// history, as tally.Record counts it for a single key.
			case r.Outcome == OutcomeGranted || r.Outcome == OutcomeQuarantined:
				if a.per[i].epochs[j] == epochNew {
					fresh++
				} else {
					others++
				}
			case r.Outcome == OutcomeTaken, r.Outcome == OutcomeNotHeld:
				others++ // a node with history, for some key at least
			}
		}
		brandNew[j] = others == 0 && fresh >= a.c.quorum
	}
	var grants []int
	for i, r := range acq.results {
		if r.Outcome != OutcomeGranted && r.Outcome != OutcomeQuarantined {
			continue
		}
		grants = append(grants, i)
		if r.Outcome == OutcomeGranted || acq.epochs[i] == epochNodeQuarantined {
			continue // a quarantined node was logged once, when it entered its quarantine
		}
		counts := true
		for j, st := range a.per[i].epochs {
			if st == epochQuarantined || (st == epochNew && !brandNew[j]) {
				counts = false
			}
		}
		if counts {
			acq.results[i].Outcome, acq.results[i].QuarantineLeft = OutcomeGranted, 0
			acq.granted++
		} else {
			a.cfg.logger.Warn("redlock: vote not counted: node quarantined by the amnesia guard",
				"key", keyAttr(strings.Join(a.mk.names, ",")), "node", r.Node, "quarantine_left", r.QuarantineLeft)
		}
	}
	return grants
}

// fence sets tokens to each key's highest counter among the grants and,
// unless a majority of them returned every key's token, writes the tokens
// back (owner-checked, with vouching where needed), deciding at a majority
// of nodes that hold every token. It returns why that fell short.
func (a *multiAcq) fence(voteCtx context.Context, acq *tally, grants []int, tokens []uint64, calls *voteCalls) error {
	for j := range tokens {
		for _, i := range grants {
			tokens[j] = max(tokens[j], a.per[i].counters[j])
		}
	}
	hasAll := make([]bool, len(a.c.nodes))
	agreed := 0
	for _, i := range grants {
		hasAll[i] = true
		for j, t := range tokens {
			if a.per[i].counters[j] != t {
				hasAll[i] = false
			}
		}
		if hasAll[i] {
			agreed++
		}
	}
	if agreed >= a.c.quorum {
		return nil
	}
	call := a.fenceCall(tokens, a.quarantine > 0)
	isGrant := make([]bool, len(a.c.nodes))
	for _, i := range grants {
		isGrant[i] = true
	}
	t, done := a.c.voteQuorum(context.WithoutCancel(voteCtx), a.timeout, func(ctx context.Context, n *node) reply {
		switch {
		case !isGrant[n.Idx]:
			return reply{Code: codeNotHeld}
		case hasAll[n.Idx]:
			return reply{Code: codeApplied}
		}
		code, err := call.Run(ctx, n).Int64()
		return reply{Code: code, Err: err}
	}, nil)
	calls.add(done)
	if t.granted < a.c.quorum {
		return fmt.Errorf("fencing write-back: every token is on %d of %d nodes needed", t.granted, a.c.quorum)
	}
	return nil
}

// fenceCall is multiFenceScript's call: the tokens ("0" for none) and
// vouching on or off.
func (a *multiAcq) fenceCall(tokens []uint64, vouch bool) *nodecall.ScriptCall {
	args := make([]any, 0, 3+len(tokens))
	v := "0"
	if vouch {
		v = "1"
	}
	args = append(args, a.call.BoxedArg(0), v, retentionMs(a.cfg))
	for _, t := range tokens {
		args = append(args, strconv.FormatUint(t, 10))
	}
	return nodecall.NewScriptCallBoxed(multiFenceScript, a.call.Keys(), a.call.BoxedKeys(len(a.call.Keys())), args...).ForNodes(len(a.c.nodes))
}

// vouch sends, in the background, the vouching of a successful
// acquisition to the grants that have an untrusted key (amnesia guard);
// Close waits for it. It reports whether the Lock's release must vouch
// too: not every node granted in time with every epoch trusted (a release
// may overtake the vouching, and a late grant gets none but the release's).
func (a *multiAcq) vouch(acq *tally, grants []int) bool {
	if a.quarantine == 0 {
		return false
	}
	var need []*node
	for _, i := range grants {
		if slices.ContainsFunc(a.per[i].epochs, func(st int64) bool { return st != epochTrusted }) {
			need = append(need, a.c.nodes[i])
		}
	}
	if len(need) == 0 {
		return len(grants) < len(a.c.nodes)
	}
	call := a.fenceCall(make([]uint64, len(a.mk.names)), true)
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

// taken returns the index of the first key a node found held (-1: none)
// and, when there is one, the *KeysTakenError that lists them all.
func (a *multiAcq) taken(acq *tally) (int, error) {
	var e KeysTakenError
	for j, name := range a.mk.names {
		var hs []KeyHolder
		for i, r := range acq.results {
			if r.Outcome != OutcomeTaken || a.per[i].held == nil || !a.per[i].held[j] {
				continue
			}
			o := a.per[i].holders[j]
			hs = append(hs, KeyHolder{Node: r.Node, Holder: o[:min(len(o), holderLen)]})
		}
		if hs != nil {
			e.Keys = append(e.Keys, TakenKey{Key: name, Holders: hs})
		}
	}
	if e.Keys == nil {
		return -1, nil
	}
	return slices.Index(a.mk.names, e.Keys[0].Key), &e
}

// decide records how the attempt ended; grants that arrived late while it
// was undecided need nothing more: after a failure the clean-up reaches
// their nodes, after a success Release does.
func (a *multiAcq) decide(st int32) {
	a.mu.Lock()
	a.state = st
	a.early = nil
	a.mu.Unlock()
	if a.decided != nil {
		close(a.decided)
	}
}

// late receives a reply that arrived after the vote was decided. After a
// failure a grant, or a call that was sent but got no answer, gets the
// owner-checked delete (the clean-up may have run before its SET); so does
// a "taken" from a client that may re-send. After a success nothing is
// needed: Release deletes the keys there once the call has returned.
func (a *multiAcq) late(r reply) {
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

// undo is the owner-checked delete of every key of the attempt, telling
// no waiter (multiReleaseLua). Grants create epochs void, so no epoch
// needs voiding.
func (a *multiAcq) undo() *nodecall.ScriptCall {
	return nodecall.NewScriptCallBoxed(multiReleaseScript, a.call.Keys(), a.call.BoxedKeys(len(a.call.Keys())), a.call.BoxedArg(0), "undo")
}

// cleanUp deletes the failed attempt's keys on every node that may hold
// them (as acquisition.cleanUp): not where nothing was sent, not where a
// client that never re-sends answered "taken", and not where the acquire
// call still waits for its reply (late deletes there once it comes).
func (a *multiAcq) cleanUp(acq *tally) <-chan struct{} {
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
		if code == codeHandedOff {
			code = codeApplied
		}
		return reply{Code: code, Err: err}
	})
	return done
}

// multiReleaseCall is Release's call for a multi-key lock.
// With the amnesia guard, when not every node granted in time with
// trusted epochs (vouch), it vouches and writes the tokens back where it
// deletes the keys: it may overtake the acquisition's follow-up writes.
func (l *Lock) multiReleaseCall() *nodecall.ScriptCall {
	if !l.vouch {
		return nodecall.NewScriptCallBoxed(multiReleaseScript, l.keys, l.keyArgs, l.ownerArg, "0")
	}
	args := make([]any, 0, 2+len(l.multi.tokens))
	args = append(args, l.ownerArg, "1")
	for _, t := range l.multi.tokens {
		args = append(args, strconv.FormatUint(t, 10))
	}
	return nodecall.NewScriptCallBoxed(multiReleaseScript, l.keys, l.keyArgs, args...)
}

// multiExtendCall is Extend's call for a multi-key lock.
func (l *Lock) multiExtendCall(ttl time.Duration) *nodecall.ScriptCall {
	c := l.client
	return nodecall.NewScriptCallBoxed(multiExtendScript, l.keys, l.keyArgs, l.ownerArg, c.ttlArg.Arg(ttl), c.retentionArg.Arg(l.cfg.retention))
}
