package redlock

// Leader election on the lock: a leadership is the lock on the election's
// key (ElectionKey), kept alive by a Lease; its term is the lock's fencing
// token, and the leader's identity travels in the lock's owner value.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// identitySep separates a leader's identity from the random part of its
// owner value: "<identity>#<RandomOwner()>". The identity is everything
// before the last "#", so it may contain "#" itself.
const identitySep = "#"

// maxIdentityLen bounds an identity, in bytes.
const maxIdentityLen = 256

// ElectionKey returns the lock key (before any WithKeyPrefix) that holds
// the election name: "{name}:leader", or "name:leader" when name already
// has a Redis Cluster hash tag. Its fencing counter and epoch sit beside it
// as for any lock. Show an election's state on the nodes with Inspect (or
// `redlock status --key`) on this key; do not Acquire it yourself.
func ElectionKey(name string) string { return SiblingKey(name, ":leader") }

// Leader is an election's leader as a majority of the nodes report it. The
// zero Leader (Term 0) means no leader; a leader's Term is never 0.
type Leader struct {
	// Identity is what the leader passed to Campaign (or Lead).
	Identity string
	// Term is the leader's fencing token (Leadership.Term).
	Term uint64
}

// Leadership is a won election: the lock on the election's key, kept alive
// by a Lease until it is lost or resigned. Its methods are safe for
// concurrent use.
type Leadership struct {
	client   *Client
	cfg      config
	name     string // the election's name, as the caller gave it
	onNodes  string // the lock key on the nodes (prefix included)
	identity string
	term     uint64
	lease    *Lease

	resignOnce sync.Once
	resignErr  error
}

// Name returns the election's name.
func (l *Leadership) Name() string { return l.name }

// Identity returns the leader's identity, as given to Campaign.
func (l *Leadership) Identity() string { return l.identity }

// Term returns the leadership's term: the lock's fencing token. It is
// greater than the term of every earlier leader of this election (under
// the conditions of Lock.Token; docs/fencing.md), and constant for the
// whole leadership. Pass it to what the leader writes, so that a deposed
// leader's late writes are refused (fencing.Register, docs/election.md).
func (l *Leadership) Term() uint64 { return l.term }

// Context returns a context that ends the moment the leadership can no
// longer be trusted, with the rules of Lock.KeepAlive: an extension failed
// or the validity ran out (ErrLockLost), the hold limit passed
// (ErrHoldLimit), Campaign's ctx ended, or the leadership was resigned.
func (l *Leadership) Context() context.Context { return l.lease.Context() }

// Done returns Context().Done().
func (l *Leadership) Done() <-chan struct{} { return l.lease.Done() }

// Err returns nil while the leadership lasts, and then why it ended: the
// Lease's cause (see Lease.Err).
func (l *Leadership) Err() error { return l.lease.Err() }

// Lease returns the Lease that keeps the leadership's lock alive; its Lock
// has the current validity deadline.
func (l *Leadership) Lease() *Lease { return l.lease }

// Resign ends the leadership and hands it over at once: it stops the
// extensions and releases the lock (Lease.Release, whose error it returns;
// owner-checked, so a deposed leader's Resign never touches its
// successor's lock). The waiting candidate that has waited longest is woken
// by the release and elected within about two round trips, without waiting
// for the TTL; watchers (WatchLeader) are told. Only the first call does
// this; later calls return its error. A nested leadership (see Campaign)
// only ends its context and returns nil.
func (l *Leadership) Resign(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	l.resignOnce.Do(func() {
		if l.lease.nested {
			l.resignErr = l.lease.Release(ctx)
			return
		}
		if l.cfg.mutant.ResignsBlindly() { // chaos mutant hook
			l.client.deleteEverywhere(ctx, l.onNodes, l.cfg.timeoutFor(l.lease.Lock().TTL()))
		}
		l.resignErr = l.lease.Release(ctx)
		l.client.announce(ctx, l.onNodes, "resigned", l.cfg.timeoutFor(l.lease.Lock().TTL()))
	})
	return l.resignErr
}

// Campaign campaigns for the election name as identity (a host or pod name:
// non-empty, at most 256 bytes of UTF-8 without control characters) and
// blocks until this candidate is elected, the retry policy gives up
// (DefaultRetry never does), or ctx ends. The Leadership's context derives
// from ctx and ends, with its cause, the moment the leadership can no longer
// be trusted; its term is the fencing token. Call Resign when done. See
// Leader election in the package doc for how it works and nested campaigns.
//
// opts are Acquire's Options (WithRetry, ...; a WithOwnerGenerator is
// overridden) and KeepAlive's HoldOptions (WithExtendInterval, WithMaxHold),
// mixed as in Do (DoOption). It returns ErrInvalidArgument for an empty name,
// a bad identity, fencing off, or a TTL or option Acquire or KeepAlive
// refuses, before contacting any node;
// ErrClosed on a closed Client; otherwise Acquire's errors (ErrNotAcquired
// wrapping ctx's error when ctx ended).
func (c *Client) Campaign(ctx context.Context, name, identity string, ttl time.Duration, opts ...DoOption) (*Leadership, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, hold, key, err := c.electionConfig(ctx, name, &identity, ttl, opts)
	if err != nil {
		return nil, err
	}
	return c.campaign(ctx, cfg, hold, name, key, identity, ttl)
}

// campaign is Campaign once its arguments were checked.
func (c *Client) campaign(ctx context.Context, cfg config, hold holdConfig, name, key, identity string, ttl time.Duration) (*Leadership, error) {
	acfg := cfg
	acfg.owner = func() (string, error) {
		r, err := RandomOwner()
		if err != nil {
			return "", err
		}
		return identity + identitySep + r, nil
	}
	lock, err := c.acquireWith(ctx, key, ttl, acfg)
	if err != nil {
		return nil, err
	}
	if lock.nested {
		if got := ownerIdentity(lock.owner); got != identity {
			return nil, fmt.Errorf("%w: the context already leads %q as %q, not %q", ErrInvalidArgument, name, got, identity)
		}
	}
	lease, err := lock.keepAlive(ctx, hold)
	if err != nil {
		_ = lock.Release(context.WithoutCancel(ctx))
		return nil, err
	}
	l := &Leadership{client: c, cfg: cfg, name: name, onNodes: lock.keys[0], identity: identity, term: lock.token, lease: lease}
	if cfg.mutant.ConstantTerm() { // chaos mutant hook
		l.term = 1
	}
	if !lock.nested {
		c.announce(ctx, l.onNodes, "elected", cfg.timeoutFor(ttl))
	}
	return l, nil
}

// electionConfig checks the arguments of Campaign and Lead, and returns the
// call's configuration, its Lease's, and the election's lock key (without the
// prefix).
// identity is checked unless ctx already leads the election (then it is
// compared with the outer leadership's by campaign).
func (c *Client) electionConfig(ctx context.Context, name string, identity *string, ttl time.Duration, opts []DoOption) (config, holdConfig, string, error) {
	cfg, hold := c.cfg, holdConfig{}
	if err := applyOptions(opts, &cfg, &hold); err != nil {
		return cfg, hold, "", err
	}
	if name == "" {
		return cfg, hold, "", fmt.Errorf("%w: empty election name", ErrInvalidArgument)
	}
	if err := checkIdentity(*identity); err != nil {
		return cfg, hold, "", err
	}
	if !cfg.fencing {
		return cfg, hold, "", fmt.Errorf("%w: election %q: fencing is off, but the term is the fencing token (drop WithFencing(false))", ErrInvalidArgument, name)
	}
	key := ElectionKey(name)
	if heldLease(ctx, c, cfg.prefix+key) != nil {
		return cfg, hold, key, nil // nested: the outer leadership's TTL stands
	}
	if _, err := checkAcquire(key, ttl, cfg); err != nil {
		return cfg, hold, "", err
	}
	if _, err := hold.intervalFor(ttl, cfg.driftFactor); err != nil {
		return cfg, hold, "", err
	}
	if c.eng.Closed() {
		return cfg, hold, "", ErrClosed
	}
	return cfg, hold, key, nil
}

// checkIdentity rejects an identity that is empty, longer than
// maxIdentityLen bytes, not UTF-8, or holds a control character.
func checkIdentity(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty identity", ErrInvalidArgument)
	case len(id) > maxIdentityLen:
		return fmt.Errorf("%w: identity of %d bytes, more than %d", ErrInvalidArgument, len(id), maxIdentityLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: identity %q is not UTF-8", ErrInvalidArgument, id)
	case strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("%w: identity %q holds a control character", ErrInvalidArgument, id)
	}
	return nil
}

// ownerIdentity returns the identity in an election's owner value: what
// precedes the last identitySep, or "" when there is none (the key was not
// set by Campaign).
func ownerIdentity(owner string) string {
	i := strings.LastIndex(owner, identitySep)
	if i < 0 {
		return ""
	}
	return owner[:i]
}

// leaderChannelPrefix starts the pub/sub channel on which an election's
// changes are announced: "redlock:leader:<lock key on the nodes>".
const leaderChannelPrefix = "redlock:leader:"

// publisher is the part of a go-redis client that publishes.
type publisher interface {
	Publish(ctx context.Context, channel string, message any) *redis.IntCmd
}

// announce tells the election's watchers, on every node, that its leader
// changed (msg says how). It is a hint: a watcher re-reads the leader from
// the nodes. The messages are sent in the background, each within timeout;
// Close waits for them.
func (c *Client) announce(ctx context.Context, onNodes, msg string, timeout time.Duration) {
	done, open := c.eng.Begin(timeout)
	if !open {
		done()
		return
	}
	ch := leaderChannelPrefix + onNodes
	bg := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		p, ok := n.Client.(publisher)
		if !ok || isNil(p) {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(bg, timeout)
			defer cancel()
			_ = p.Publish(cctx, ch, msg).Err()
		})
	}
	go func() {
		defer done()
		wg.Wait()
	}()
}

// blindDeleteScript deletes a key whoever holds it: only the chaos
// harness's resign-without-owner-check mutant sends it.
var blindDeleteScript = redis.NewScript(`return redis.call('DEL', KEYS[1])`)

// deleteEverywhere runs blindDeleteScript on every node (the mutant's
// resign).
func (c *Client) deleteEverywhere(ctx context.Context, key string, timeout time.Duration) {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			_ = blindDeleteScript.Run(cctx, n.Client, []string{key}).Err()
		})
	}
	wg.Wait()
}

// Leader reads the election's leader from the nodes, each within the
// per-node timeout (WithNodeTimeout, default 1 s): the identity and term
// that a majority of the nodes hold (the owner value and fencing counter
// of the election's key, as Inspect reads them). It is read-only and may be
// out of date right after it returns. A term read while the new leader's
// token is still being written back to the nodes (only when their counters
// disagreed) can be below the term Campaign hands that leader; it is never
// below an earlier leader's.
//
// It returns ErrNoLeader when a majority answered and no leader can hold a
// majority of the nodes; an error wrapping ErrNoQuorum, with each node's
// error, when too few nodes answered to tell; ErrInvalidArgument for an
// empty name; ErrClosed on a closed Client. opts may set WithKeyPrefix and
// WithNodeTimeout only: any other option, which it would ignore, gives
// ErrInvalidArgument naming it.
func (c *Client) Leader(ctx context.Context, name string, opts ...Option) (Leader, error) {
	if ctx == nil {
		return Leader{}, errNilContext
	}
	onNodes, cfg, err := c.leaderKey("Leader", name, opts)
	if err != nil {
		return Leader{}, err
	}
	return c.readLeader(ctx, onNodes, cfg)
}

// leaderKey checks the arguments of Leader and WatchLeader (call) and
// returns the election's lock key on the nodes.
func (c *Client) leaderKey(call, name string, opts []Option) (string, config, error) {
	cfg := c.cfg
	err := cfg.applyOnly(opts, call, func(probe, was *config) {
		probe.prefix, probe.nodeTimeout = was.prefix, was.nodeTimeout
	})
	if err != nil {
		return "", cfg, err
	}
	if name == "" {
		return "", cfg, fmt.Errorf("%w: empty election name", ErrInvalidArgument)
	}
	onNodes := cfg.prefix + ElectionKey(name)
	if err := checkKeyName(onNodes); err != nil {
		return "", cfg, err
	}
	if c.eng.Closed() {
		return "", cfg, ErrClosed
	}
	return onNodes, cfg, nil
}

// readLeader reads every node's state of the election's key and returns
// the (identity, term) a majority agrees on.
func (c *Client) readLeader(ctx context.Context, onNodes string, cfg config) (Leader, error) {
	timeout := cfg.nodeTimeout
	if timeout <= 0 {
		timeout = inspectTimeout
	}
	done, open := c.eng.Begin(timeout)
	defer done()
	if !open {
		return Leader{}, ErrClosed
	}
	keys := []string{onNodes, fenceKey(onNodes), epochKey(onNodes)}
	states := make([]NodeState, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			states[i] = inspectNode(nctx, n, keys)
			c.health.record(ctx, i, states[i].Err)
		})
	}
	wg.Wait()
	ld, err := tallyLeader(states, c.quorum)
	if errors.Is(err, ErrNoQuorum) {
		err = c.misconfiguredRead(states, err)
	}
	return ld, err
}

// misconfiguredRead returns err wrapping why the nodes cannot be read
// (ErrMisconfigured, see Client.misconfigured) when so many of states are
// error replies no retry fixes that the others are fewer than a quorum.
func (c *Client) misconfiguredRead(states []NodeState, err error) error {
	qe := &QuorumError{Quorum: c.quorum, Nodes: make([]NodeResult, len(states))}
	for i, st := range states {
		qe.Nodes[i] = NodeResult{Node: st.Node, Outcome: OutcomeGranted}
		if st.Err != nil {
			qe.Nodes[i].Outcome, qe.Nodes[i].Err = OutcomeError, st.Err
		}
	}
	if cause := c.misconfigured(qe); cause != nil {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// tallyLeader returns the leader that at least quorum of the node states
// agree on (the same owner value and fencing counter), ErrNoLeader when no
// leader could have a quorum whatever the silent nodes hold, and an error
// wrapping ErrNoQuorum otherwise.
func tallyLeader(states []NodeState, quorum int) (Leader, error) {
	type vote struct {
		owner string
		fence uint64
	}
	votes := map[vote]int{}
	best, silent := 0, 0
	var errs []error
	for _, st := range states {
		if st.Err != nil {
			silent++
			errs = append(errs, fmt.Errorf("%s: %w", st.Node, st.Err))
			continue
		}
		if !st.Held || st.Fence == 0 {
			continue
		}
		v := vote{st.Owner, st.Fence}
		votes[v]++
		best = max(best, votes[v])
		if votes[v] >= quorum {
			return Leader{Identity: ownerIdentity(v.owner), Term: v.fence}, nil
		}
	}
	if best+silent < quorum {
		return Leader{}, ErrNoLeader
	}
	return Leader{}, fmt.Errorf("%w: %d of %d nodes answered, too few to tell the leader: %w", ErrNoQuorum, len(states)-silent, len(states), errors.Join(errs...))
}

// leadRetryPause is how long Lead waits before it campaigns again when
// Campaign gave up (a retry policy that stops): DefaultRetry's longest delay.
const leadRetryPause = 250 * time.Millisecond

// Lead runs fn each time this candidate is elected, and campaigns again
// whenever the leadership is lost, until ctx ends: losing leadership never
// needs a process exit. Each term, fn gets the Leadership and its context,
// which ends the moment the leadership can no longer be trusted; fn must then
// return promptly (Lead waits for it: two calls of fn never overlap). If fn
// returns while still leading, Lead resigns and returns fn's error (nil:
// done); if the leadership was lost or hit the hold limit, Lead resigns and
// campaigns again, with a new term; if ctx ended, Lead resigns once fn
// returned and returns context.Cause(ctx). See Leader election.
//
// A panic in fn resigns, then propagates. When Lead returns, no goroutine of
// it is left. It returns Campaign's argument errors (and ErrInvalidArgument
// for a nil fn) before contacting a node, ErrClosed once the Client is
// closed, and Campaign's error when it matches ErrMisconfigured (no campaign
// can win until the nodes are fixed). opts are Campaign's; when its retry
// policy gives up otherwise, Lead campaigns again after 250 ms.
func (c *Client) Lead(ctx context.Context, name, identity string, ttl time.Duration, fn func(ctx context.Context, l *Leadership) error, opts ...DoOption) error {
	if ctx == nil {
		return errNilContext
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg, hold, key, err := c.electionConfig(ctx, name, &identity, ttl, opts)
	if err != nil {
		return err
	}
	var firstTerm uint64
	for {
		l, err := c.campaign(ctx, cfg, hold, name, key, identity, ttl)
		switch {
		case ctx.Err() != nil:
			if l != nil { // elected as ctx ended
				_ = l.Resign(context.WithoutCancel(ctx))
			}
			return context.Cause(ctx)
		case errors.Is(err, ErrInvalidArgument), errors.Is(err, ErrClosed), errors.Is(err, ErrMisconfigured):
			return err
		case err != nil:
			sleepCtx(ctx, leadRetryPause)
			continue
		}
		if firstTerm == 0 {
			firstTerm = l.term
		} else if cfg.mutant.RecampaignKeepsTerm() { // chaos mutant hook
			l.term = firstTerm
		}
		fnErr, leading := runLeading(ctx, l, fn)
		_ = l.Resign(context.WithoutCancel(ctx)) // logged and observed by Release
		switch {
		case leading:
			return fnErr
		case ctx.Err() != nil:
			return context.Cause(ctx)
		}
	}
}

// runLeading runs fn for leadership l and reports its error and whether
// the leadership was still live when fn returned. At the hold limit l is
// resigned at once, even while fn still runs. A panic in fn resigns l and
// propagates.
func runLeading(ctx context.Context, l *Leadership, fn func(ctx context.Context, l *Leadership) error) (err error, leading bool) {
	fnDone, watcherDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-l.Done():
			if errors.Is(l.Err(), ErrHoldLimit) {
				_ = l.Resign(context.WithoutCancel(ctx))
			}
		case <-fnDone:
		}
	}()
	returned := false
	defer func() {
		close(fnDone)
		<-watcherDone
		if !returned { // fn panicked or called runtime.Goexit
			_ = l.Resign(context.WithoutCancel(ctx))
		}
	}()
	err = fn(l.Context(), l)
	returned = true
	return err, l.Context().Err() == nil
}

// sleepCtx waits d, or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
