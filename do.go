package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errReleased is the context cause of a released Lease.
var errReleased = fmt.Errorf("redlock: lease released: %w", context.Canceled)

// holdConfig holds the options of KeepAlive and Do.
type holdConfig struct {
	interval time.Duration // 0: a third of the TTL
	maxHold  time.Duration // 0: no limit
}

// intervalFor returns the extension interval for a lock of the given TTL.
// An extension must start while the lock is still valid, so the interval
// must be below the validity of a fresh lock, ttl − drift.
func (h holdConfig) intervalFor(ttl time.Duration, driftFactor float64) (time.Duration, error) {
	iv := h.interval
	if iv == 0 {
		iv = ttl / 3
	}
	if v := ttl - Drift(ttl, driftFactor); iv >= v {
		return 0, fmt.Errorf("%w: extension interval %v must be below the lock's validity %v (ttl − drift)", ErrInvalidArgument, iv, v)
	}
	return iv, nil
}

// Lease keeps an acquired lock alive: it extends the lock in the background
// and provides a context that is canceled the moment the lock can no longer
// be trusted. Get one with Lock.KeepAlive; Do hands its function one. What
// the work needs is here: the fencing token (Token), the validity left,
// which follows every extension (Validity, ValidUntil), and why the Lease
// ended (Err, Done). Its methods are safe for concurrent use.
//
// The Lease's context carries the lock: Acquire (and Do) called with it, or a
// context derived from it, on the same Client and key is reentrant (see
// Client.Acquire), and the nested handle reports this Lease's validity.
type Lease struct {
	client *Client
	name   string // the key on the nodes (prefix included)
	cfg    config
	nested bool // a reentrant lease: it neither extends nor releases

	ctx     context.Context
	cancel  context.CancelCauseFunc
	holdErr error         // the cause when the hold limit ends the context
	done    chan struct{} // closed once the extender has stopped

	mu   sync.Mutex
	lock *Lock // the latest extension

	releaseOnce sync.Once
	releaseErr  error
}

// KeepAlive starts extending l in the background, every interval
// (WithExtendInterval, default TTL/3) with the lock's TTL, and returns the
// Lease that does it. The Lease's context (Context, Done) derives from ctx and
// is canceled, with a cause that Err returns, when an extension fails or the
// validity runs out first (ErrLockLost), the maximum hold time passes
// (WithMaxHold: ErrHoldLimit), ctx ends, or the Lease or the lock is
// released; see Leases in the package doc. The extensions use l's options
// (those of its acquisition). Call Release when the work is done: it stops
// the extender and releases the lock.
//
// KeepAlive returns ErrInvalidArgument for a nil ctx, a bad option, an
// interval not below l's validity, or when another Lease already keeps l
// alive; ErrClosed if the Client is closed. On a lock already released or
// lost it returns a Lease that has ended at once, its cause wrapping
// ErrLockLost.
func (l *Lock) KeepAlive(ctx context.Context, opts ...HoldOption) (*Lease, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	var hold holdConfig
	if err := applyOptions(opts, nil, &hold); err != nil {
		return nil, err
	}
	return l.keepAlive(ctx, hold)
}

// keepAlive is KeepAlive once its options were applied. A nested Lease
// neither extends nor releases, but keeps its own hold limit.
func (l *Lock) keepAlive(ctx context.Context, hold holdConfig) (*Lease, error) {
	cfg := l.cfg
	s := &Lease{client: l.client, name: l.keys[0], cfg: cfg, nested: l.nested, lock: l, done: make(chan struct{})}
	var interval time.Duration
	if !l.nested {
		var err error
		if interval, err = hold.intervalFor(l.ttl, cfg.driftFactor); err != nil {
			return nil, err
		}
		if l.client.eng.Closed() {
			return nil, ErrClosed
		}
		if !l.state.setLease(s) {
			return nil, fmt.Errorf("%w: lock %s is already kept alive by another Lease", ErrInvalidArgument, keyText(l.key))
		}
	}
	parent, stopHold := ctx, context.CancelFunc(func() {})
	if d := hold.maxHold; d > 0 {
		s.holdErr = fmt.Errorf("%w: %s held for %v", ErrHoldLimit, keyText(l.key), d)
		parent, stopHold = context.WithTimeoutCause(ctx, d, s.holdErr)
	}
	ctx, cancel := context.WithCancelCause(withHeld(parent, s))
	s.ctx, s.cancel = ctx, func(cause error) { cancel(cause); stopHold() }
	if l.nested {
		close(s.done)
		return s, nil
	}
	go s.run(l, interval, stopHold)
	return s, nil
}

// run extends the lock every interval until the Lease's context ends.
func (s *Lease) run(l *Lock, interval time.Duration, stopHold context.CancelFunc) {
	defer close(s.done)
	defer l.state.clearLease(s)
	defer stopHold()

	// The validity deadline is watched by its own timer, not by this loop,
	// so that the context ends on time even while an extension is in flight.
	key, quoted := l.key, keyText(l.key)
	validity := time.AfterFunc(time.Until(l.validUntil), func() {
		s.fail(fmt.Errorf("%w: %s: validity ran out before an extension succeeded", ErrLockLost, quoted))
	})
	defer validity.Stop()
	next := time.NewTimer(time.Until(attemptStart(l).Add(interval)))
	defer next.Stop()

	for {
		select {
		case <-s.ctx.Done():
			if s.holdErr != nil && context.Cause(s.ctx) == s.holdErr {
				s.cfg.observe(s.ctx, Event{Op: OpLost, Key: key, Err: s.holdErr})
			}
			return
		case <-next.C:
		}
		if s.cfg.mutant.NeverExtends() { // chaos mutant hook
			continue
		}
		nl, err := l.Extend(s.ctx, l.ttl)
		switch {
		case s.ctx.Err() != nil:
			// Released, lost by the validity timer, or the caller's context
			// ended: the next select returns.
		case err != nil:
			s.fail(fmt.Errorf("%w: %s: extension failed: %w", ErrLockLost, quoted, err))
		case !validity.Stop():
			// The validity ran out while the extension was in flight: the
			// timer's function is ending the context. An extension that
			// succeeds late does not make the gap safe.
		default:
			s.mu.Lock()
			s.lock = nl
			s.mu.Unlock()
			l = nl
			validity.Reset(time.Until(l.validUntil))
			next.Reset(time.Until(attemptStart(l).Add(interval)))
		}
	}
}

// attemptStart returns when the acquisition or extension that produced l
// started: its validity deadline is that instant plus ttl − drift.
func attemptStart(l *Lock) time.Time {
	return l.validUntil.Add(-(l.ttl - Drift(l.ttl, l.cfg.driftFactor)))
}

// fail ends the Lease's context with cause, and reports the loss if it was
// this call that ended it.
func (s *Lease) fail(cause error) {
	if s.cfg.mutant.IgnoresLoss() { // chaos mutant hook
		return
	}
	// Every handle of the lock stops trusting it before the context says so.
	s.Lock().state.ended.Store(true)
	s.cancel(cause)
	if context.Cause(s.ctx) == cause {
		s.cfg.observe(s.ctx, Event{Op: OpLost, Key: s.Lock().key, Err: cause})
	}
}

// stop ends the Lease's context (unless it has ended already) and waits for
// the extender to stop.
func (s *Lease) stop() {
	s.cancel(errReleased)
	<-s.done
}

// Context returns the lock-bound context: it derives from the context given
// to KeepAlive and is canceled when the lock can no longer be trusted, the
// hold limit passes, or the Lease is released (see KeepAlive). It carries the
// lock for reentrant Acquire.
func (s *Lease) Context() context.Context { return s.ctx }

// Done returns a channel that is closed when the Lease's context ends:
// Context().Done().
func (s *Lease) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while the Lease's context is live, and afterwards why it
// ended: the same error as context.Cause(s.Context()). That is an error
// wrapping ErrLockLost (with the failed extension's *QuorumError, if one
// failed) or ErrHoldLimit, the cause of the parent context, or one wrapping
// context.Canceled after Release. Test it with errors.Is.
func (s *Lease) Err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// Key returns the key as passed to Acquire or Do (without the prefix).
func (s *Lease) Key() string { return s.Lock().Key() }

// Token returns the lock's fencing token (see Lock.Token): extensions keep
// it. Pass it with every write to the resource the lock protects. It is 0
// when fencing is off.
func (s *Lease) Token() uint64 { return s.Lock().Token() }

// ValidUntil returns the validity deadline of the latest successful
// extension (at first, the acquisition's): it moves forward with every
// extension. It does not change when the Lease ends: Validity says so.
func (s *Lease) ValidUntil() time.Time { return s.Lock().ValidUntil() }

// Validity returns how long the work may still count on the lock: the time
// left until ValidUntil while the Lease is live, and zero or negative once
// its context has ended (Err is not nil), whatever the deadline says. Work
// only while it is positive. It reads the monotonic clock.
func (s *Lease) Validity() time.Duration {
	left := s.Lock().Validity()
	if s.ctx.Err() != nil {
		return min(left, 0)
	}
	return left
}

// Lock returns the latest handle of the lock: the one from the most recent
// successful extension, whose ValidUntil is the current validity deadline.
func (s *Lease) Lock() *Lock {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock
}

// Release ends the Lease's context, waits for the extender to stop, then
// releases the lock on the nodes (Lock.Release on the latest handle, whose
// error it returns; ctx is used as there). Only the first call does this;
// later calls return the first call's error. For a nested (reentrant) Lease
// it only ends the context and returns nil: the outermost holder releases.
func (s *Lease) Release(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	s.releaseOnce.Do(func() {
		s.stop()
		if !s.nested {
			s.releaseErr = s.Lock().Release(ctx)
		}
	})
	return s.releaseErr
}

// Do acquires the lock on key for ttl (as Acquire, with the same Options),
// runs fn with the Lease that keeps the lock (as Lock.KeepAlive, with the
// HoldOptions), and releases the lock when fn returns or panics, or when the
// hold limit (WithMaxHold) passes, whichever is first. opts mix both kinds
// (DoOption). fn's ctx is lease.Context(); lease gives the fencing token to
// pass with fn's writes, the validity left and, once ctx ended, why
// (lease.Err()). A panic propagates after the release. See Leases in the
// package doc for what runs in the background, the release, and Do nested in
// Do.
//
// It returns Acquire's error, without running fn, when the lock was not
// acquired; ErrInvalidArgument for a nil fn or an extension interval not
// below the validity, before contacting any node; when the lock was lost or
// the hold limit passed before fn returned, an error wrapping the Lease's
// cause (ErrLockLost with a *QuorumError, or ErrHoldLimit) and fn's error, so
// errors.Is matches both (fn's error alone when it already wraps the cause);
// otherwise fn's error.
func (c *Client) Do(ctx context.Context, key string, ttl time.Duration, fn func(ctx context.Context, lease *Lease) error, opts ...DoOption) (err error) {
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
	ctx, end := cfg.startCall(ctx, OpDo, key)
	defer func() { end(nil, err) }()
	if heldLease(ctx, c, cfg.prefix+key) == nil {
		if err := checkTTL(ttl, cfg.driftFactor, cfg.timeoutFor(ttl)); err != nil {
			return err
		}
		if _, err := hold.intervalFor(ttl, cfg.driftFactor); err != nil {
			return err
		}
	}
	lock, err := c.acquireWith(ctx, key, ttl, cfg)
	if err != nil {
		return err
	}
	return c.runLeased(ctx, lock, fn, hold)
}

// runLeased is Do after the acquisition (Semaphore.Do shares it): it keeps
// lock alive while fn runs, and releases it.
func (c *Client) runLeased(ctx context.Context, lock *Lock, fn func(ctx context.Context, lease *Lease) error, hold holdConfig) error {
	lease, err := lock.keepAlive(ctx, hold)
	if err != nil {
		_ = lock.Release(context.WithoutCancel(ctx))
		return err
	}
	// At the hold limit the lock is released at once, even while fn still
	// runs (its context has ended: work that ignores it runs without the
	// lock). The watcher ends when fn returns, before Do does.
	fnDone, watcherDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watcherDone)
		select {
		case <-lease.Done():
			if errors.Is(lease.Err(), ErrHoldLimit) {
				_ = lease.Release(context.WithoutCancel(ctx))
			}
		case <-fnDone:
		}
	}()
	stopWatcher := func() { close(fnDone); <-watcherDone }
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit
			stopWatcher()
			_ = lease.Release(context.WithoutCancel(ctx))
		}
	}()
	fnErr := fn(lease.Context(), lease)
	returned = true
	stopWatcher()

	cause := lease.Err()
	_ = lease.Release(context.WithoutCancel(ctx)) // logged and observed by Release
	if errors.Is(cause, ErrLockLost) || errors.Is(cause, ErrHoldLimit) {
		switch {
		case fnErr == nil:
			return cause
		case errors.Is(fnErr, cause): // fn passed the cause on: say it once
			return fnErr
		}
		return fmt.Errorf("%w; fn returned: %w", cause, fnErr)
	}
	return fnErr
}
