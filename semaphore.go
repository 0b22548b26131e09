package redlock

// The counting semaphore: N slots, each a Redlock mutex; a permit is the
// lock on one slot. See Semaphore for why this, and not a per-node counter.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// MaxPermits is the most permits a Semaphore may have. Acquire tries the
// slots one after another while they are taken, so a semaphore of many
// permits costs up to that many round trips when it is full.
const MaxPermits = 1024

// maxWatchedSlots is how many slots' releases one waiting Acquire
// subscribes to (see Semaphore.Acquire).
const maxWatchedSlots = 8

// PermitKey returns the lock key (before any WithKeyPrefix) of slot
// (0 ≤ slot < permits) of the semaphore name: "{name}:permit:<slot>", or
// "name:permit:<slot>" when name already has a Redis Cluster hash tag, so
// that all slots of one semaphore share a cluster slot. Its fencing counter
// and epoch sit beside it as for any lock. Show a slot's state with Inspect
// (or `redlock status --key`) on this key; do not Acquire it yourself.
func PermitKey(name string, slot int) string {
	return SiblingKey(name, ":permit:"+strconv.Itoa(slot))
}

// Semaphore is a counting semaphore over the Client's nodes: at most
// Permits holders of its name at once (Redisson's RSemaphore with expiring
// permits, Curator's InterProcessSemaphoreV2, `consul lock -n`). Get one with
// Client.Semaphore; it is safe for concurrent use and holds no state on the
// nodes until a permit is acquired.
//
// It has one slot per permit, each a Redlock mutex on PermitKey(name, i),
// and a permit is the lock on one slot, taken with every rule of
// Client.Acquire: a majority of nodes, validity, fencing, the amnesia guard,
// clean-up. Two holders of one slot at once would be two holders of one
// lock, so at most Permits hold at once. A counter on each node, capped at
// Permits, would not do: with 5 nodes and 2 permits, three holders can each
// be admitted by 3 nodes (9 admissions within the 10 the nodes allow). See
// docs/semaphore.md.
type Semaphore struct {
	c       *Client
	name    string
	permits int
	opts    []Option
}

// Semaphore returns the semaphore name with the given number of permits.
// opts (applied after the Client's, before each call's) are the options of
// its acquisitions and Do. It returns ErrInvalidArgument for an empty name,
// one whose slot keys would be longer than MaxKeyLen or have a brace but no
// hash tag, permits outside [1, MaxPermits], or a bad option; ErrClosed when
// the Client is closed. Every holder must use the same name and permits.
func (c *Client) Semaphore(name string, permits int, opts ...Option) (*Semaphore, error) {
	if c.eng.Closed() {
		return nil, ErrClosed
	}
	if permits < 1 || permits > MaxPermits {
		return nil, fmt.Errorf("%w: permits %d must be in [1, %d]", ErrInvalidArgument, permits, MaxPermits)
	}
	cfg := c.cfg
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if name == "" {
		return nil, fmt.Errorf("%w: empty semaphore name", ErrInvalidArgument)
	}
	if _, err := checkKey(name, cfg.prefix); err != nil {
		return nil, err
	}
	if _, err := checkKey(PermitKey(name, permits), cfg.prefix); err != nil {
		return nil, err
	}
	return &Semaphore{c: c, name: name, permits: permits, opts: opts}, nil
}

// Name returns the semaphore's name.
func (s *Semaphore) Name() string { return s.name }

// Permits returns how many holders the semaphore allows at once.
func (s *Semaphore) Permits() int { return s.permits }

// Permit is one permit of a Semaphore: the Lock on one of its slots. Every
// Lock method applies (Release, KeepAlive, Token, ValidUntil, …); Key is
// PermitKey(Name(), Slot()), and Attempts counts the rounds Acquire made.
// The fencing token increases from holder to holder of the same slot, not
// across slots: a resource that fences a semaphore's holders keeps one
// high-water mark per slot (per Key).
type Permit struct {
	*Lock
	name string
	slot int
}

// Name returns the semaphore's name.
func (p *Permit) Name() string { return p.name }

// Slot returns the permit's slot, in [0, permits).
func (p *Permit) Slot() int { return p.slot }

// Extend is Lock.Extend on the permit's slot; it returns the new Permit.
func (p *Permit) Extend(ctx context.Context, ttl time.Duration) (*Permit, error) {
	l, err := p.Lock.Extend(ctx, ttl)
	if err != nil {
		return nil, err
	}
	return &Permit{Lock: l, name: p.name, slot: p.slot}, nil
}

// Acquire takes one permit for ttl, waiting while all are taken: each
// round tries every slot once, from a random one on, with one attempt of
// Client.Acquire's each, and returns the first slot a majority granted.
// Between rounds it waits the retry policy's delay, cut short when a holder
// releases one of the first few slots (see Waiting in the package doc). It
// returns the Permit, or the error of Client.Acquire, with the semaphore's
// name as the *QuorumError's Key: errors.Is(err, ErrTaken) when every slot
// was taken in the last round, ErrNoQuorum in an outage (after the outage
// limit, counted over rounds as Acquire counts attempts, and reported to the
// Observer and the logger as Acquire's), the context's error when ctx
// ended; ErrInvalidArgument for a bad ttl or option, ErrClosed when the
// Client is closed.
func (s *Semaphore) Acquire(ctx context.Context, ttl time.Duration, opts ...Option) (*Permit, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, _, err := semaphoreConfig(s, opts)
	if err != nil {
		return nil, err
	}
	return s.acquire(ctx, ttl, cfg, true)
}

// TryAcquire is Acquire with one round: it tries each slot once and
// returns an error matching ErrTaken when all were taken.
func (s *Semaphore) TryAcquire(ctx context.Context, ttl time.Duration, opts ...Option) (*Permit, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg, _, err := semaphoreConfig(s, opts)
	if err != nil {
		return nil, err
	}
	return s.acquire(ctx, ttl, cfg, false)
}

// semaphoreConfig returns the options of one call of s: the Client's, the
// semaphore's, then opts.
func semaphoreConfig[O DoOption](s *Semaphore, opts []O) (config, holdConfig, error) {
	cfg, hold := s.c.cfg, holdConfig{}
	if err := cfg.apply(s.opts); err != nil {
		return cfg, hold, err
	}
	return cfg, hold, applyOptions(opts, &cfg, &hold)
}

// acquire is Acquire (wait) or TryAcquire once the options were applied.
func (s *Semaphore) acquire(ctx context.Context, ttl time.Duration, cfg config, wait bool) (*Permit, error) {
	if _, err := checkAcquire(PermitKey(s.name, 0), ttl, cfg); err != nil {
		return nil, err
	}
	// Each slot gets one attempt per round, and the outage is this call's
	// (out), over its rounds, as Acquire's is over its attempts.
	slotCfg := cfg
	slotCfg.retry, slotCfg.outageLimit = NoRetry(), 0
	slots := cfg.mutant.Slots(s.permits) // chaos mutant hook
	var (
		watch        []*lockWaiter
		ctxEnd, done = cfg.startCall(ctx, OpAcquire, s.name)
		out          = outage{c: s.c, cfg: cfg, ctx: ctxEnd, key: s.name}
	)
	ctx = ctxEnd
	defer func() {
		for _, w := range watch {
			w.leave()
		}
	}()
	for round := 1; ; round++ {
		for _, w := range watch {
			w.mark()
		}
		started := time.Now()
		p, qe, err := s.round(ctx, ttl, slotCfg, slots)
		if p != nil {
			p.attempts = round // Attempts: the rounds this call made
			out.answered(started, p.nodes)
		}
		if p != nil || err != nil {
			done(lockOf(p), err)
			return p, err
		}
		qe.Key, qe.Attempts = s.name, round
		if unfix := s.c.misconfigured(qe); unfix != nil {
			qe.Cause, wait = joinCause(qe.Cause, unfix), false
		} else if over := out.record(started, qe); over != nil {
			qe.Cause, wait = joinCause(qe.Cause, over), false
		}
		if !wait || !s.waitRound(ctx, cfg.retry, round, slots, cfg.prefix, &watch, out.unannounced()) {
			if err := callerEnded(ctx); err != nil && !errors.Is(qe.Cause, err) {
				qe.Cause = joinCause(qe.Cause, err)
			}
			done(nil, qe)
			return nil, qe
		}
	}
}

// lockOf returns p's Lock, or nil.
func lockOf(p *Permit) *Lock {
	if p == nil {
		return nil
	}
	return p.Lock
}

// round tries each slot once, from a random one on. It returns the first
// permit granted; or the round's failure: the last slot's *QuorumError when
// every slot was taken (it matches ErrTaken), else the first that was not
// taken; or another error (ErrClosed, the owner generator's) that ends
// Acquire. A slot that found no majority answering ends the round: the
// other slots live on the same nodes.
func (s *Semaphore) round(ctx context.Context, ttl time.Duration, cfg config, slots int) (*Permit, *QuorumError, error) {
	start := rand.IntN(slots)
	var taken, other *QuorumError
	for k := range slots {
		i := (start + k) % slots
		l, err := s.c.acquire(ctx, PermitKey(s.name, i), ttl, cfg)
		if err == nil {
			return &Permit{Lock: l, name: s.name, slot: i}, nil, nil
		}
		var qe *QuorumError
		if !errors.As(err, &qe) {
			return nil, nil, err
		}
		if errors.Is(qe, ErrTaken) {
			taken = qe
		} else if other == nil {
			other = qe
		}
		if ctx.Err() != nil || errors.Is(qe, ErrNoQuorum) {
			break
		}
	}
	qe := other
	if qe == nil {
		c := *taken
		c.Cause = joinCause(fmt.Errorf("all %d permits are taken", s.permits), taken.Cause)
		qe = &c
	}
	return nil, qe, nil
}

// waitRound waits the retry policy's delay after a failed round, and
// reports whether to make another. A release of one of the first
// maxWatchedSlots slots that a majority announces cuts the delay short;
// the waiters take their tickets at the first delay (notify.go). out, when
// not nil, is an outage to announce once the policy agreed to wait.
func (s *Semaphore) waitRound(ctx context.Context, retry RetryPolicy, round, slots int, prefix string, watch *[]*lockWaiter, out *outage) bool {
	if ctx.Err() != nil {
		return false
	}
	delay, ok := retry.NextRetry(round)
	if !ok {
		return false
	}
	if out != nil {
		out.announce()
	}
	if *watch == nil && delay > 0 {
		for i := range min(slots, maxWatchedSlots) {
			if w := s.c.notify.join(prefix + PermitKey(s.name, i)); w != nil {
				*watch = append(*watch, w)
			}
		}
	}
	queued := time.Duration(0)
	if slots <= maxWatchedSlots {
		queued = queuedDelay(retry) // every release is announced to this call
	}
	sleepAny(ctx, *watch, delay, queued)
	return ctx.Err() == nil
}

// sleepAny sleeps as lockWaiter.sleep does, until the first of ws is woken
// (or, without waiters, for d).
func sleepAny(ctx context.Context, ws []*lockWaiter, d, queued time.Duration) {
	if len(ws) <= 1 {
		var w *lockWaiter
		if len(ws) == 1 {
			w = ws[0]
		}
		w.sleep(ctx, d, queued)
		return
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			defer cancel()
			w.sleep(sctx, d, queued)
		})
	}
	wg.Wait()
}

// Do takes a permit (as Acquire, with the same Options), runs fn under it,
// kept with the HoldOptions of opts (DoOption), with the rules of
// Client.Do: the permit is extended while fn runs, fn's ctx ends the moment
// the permit can no longer be trusted (lease.Err() says why), and the
// permit is released when fn returns or panics, or at the hold limit.
// lease.Key() is the permit's slot key (PermitKey) and lease.Token() its
// fencing token. It returns Acquire's error without running fn, else what
// Client.Do returns; ErrInvalidArgument for a nil fn.
func (s *Semaphore) Do(ctx context.Context, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...DoOption) error {
	if ctx == nil {
		return errNilContext
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalidArgument)
	}
	cfg, hold, err := semaphoreConfig(s, opts)
	if err != nil {
		return err
	}
	if err := checkTTL(ttl, cfg.driftFactor, cfg.timeoutFor(ttl)); err != nil {
		return err
	}
	if _, err := hold.intervalFor(ttl, cfg.driftFactor); err != nil {
		return err
	}
	p, err := s.acquire(ctx, ttl, cfg, true)
	if err != nil {
		return err
	}
	return s.c.runLeased(ctx, p.Lock, fn, hold)
}
