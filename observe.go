package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Op names an operation: the one an Event reports, a Tracer follows, or a
// QuorumError failed at. It prints as a lower-case word ("acquire").
type Op string

// The operations. QuorumError.Op is OpAcquire, OpExtend or OpRelease.
const (
	OpAcquire Op = "acquire" // one acquisition attempt (Acquire may make several)
	OpExtend  Op = "extend"  // one Extend call, by the caller or by a Lease
	OpRelease Op = "release" // one Release call that went to the nodes
	OpLost    Op = "lost"    // a Lease stopped trusting its lock (ErrLockLost) or hit its hold limit (ErrHoldLimit)
	OpDo      Op = "do"      // one Do call (Tracer.StartCall only)
	// OpOutage: an Acquire call (or Do, AcquireMulti, a Semaphore's
	// Acquire: Key is then the keys joined by "," or the semaphore's name)
	// found no majority of the nodes answering and waits it out (OK
	// false), or found a majority answering again after that (OK true).
	// See WithOutageLimit.
	OpOutage Op = "outage"
)

// Event describes one finished operation, for metrics and tracing. The
// Observer set with WithObserver receives one per acquisition attempt,
// extension, release and lost lock, and one when an Acquire call starts
// waiting out an outage and when it ends (OpOutage). It never carries the
// owner value or a password.
type Event struct {
	// Op is OpAcquire, OpExtend, OpRelease, OpLost or OpOutage.
	Op Op
	// Key is the key as the caller named it (without the prefix).
	Key string
	// OK reports whether the operation succeeded: the attempt acquired the
	// lock, the extension applied on a quorum in time, the release was
	// confirmed by a quorum. Always false for OpLost.
	OK bool
	// Granted is how many nodes applied the operation; Quorum how many were
	// needed (N/2+1). Zero for OpLost.
	Granted, Quorum int
	// Latency is how long the operation took, from before its first request
	// to its decision (acquire: including the fencing write-back). For
	// OpOutage, how long the call had seen no majority answering: from the
	// start of its first attempt that found none to now (OK false) or to the
	// start of the attempt that found one (OK true).
	Latency time.Duration
	// Validity is, for an acquire attempt or an extension, the validity time
	// left when it decided: TTL − Latency − Drift. It is the margin the
	// holder has before the lock must no longer be trusted; zero or negative
	// means the attempt failed for lack of time. Zero for other operations.
	Validity time.Duration
	// Drift is the clock drift allowance subtracted from the TTL
	// (TTL × drift factor + 2 ms) for acquire and extend; zero otherwise.
	Drift time.Duration
	// Nodes holds each node's outcome, in node order; nil when the
	// operation made no round trip (OpLost, an extension refused locally
	// because the validity had run out). For OpOutage, those of the attempt
	// that found no majority answering, or found one again.
	Nodes []NodeResult
	// Err is why the operation failed (nil when OK): a *QuorumError for
	// acquire, extend and release (for OpOutage, the attempt's, which
	// matches ErrNoQuorum), or the cause a Lease ended with for OpLost
	// (wrapping ErrLockLost or ErrHoldLimit).
	Err error
}

// Observer receives an Event after each operation (see WithObserver). Observe
// is called synchronously on the goroutine that ran the operation, so it must
// be quick and must not block; it may be called from many goroutines at once.
// It must not call back into the Client.
type Observer interface {
	Observe(Event)
}

// Tracer is an Observer that also follows each call from its start to its
// end, to open a trace span around it (the redlockotel module implements
// it). When the Observer given to WithObserver is a Tracer, the Client calls
// StartCall as a call begins and ObserveContext instead of Observe.
type Tracer interface {
	Observer
	// StartCall is called when Acquire (not a reentrant one), Extend,
	// Release (not of a nested handle) or Do begins, after its options were
	// applied; op is OpAcquire, OpExtend, OpRelease or OpDo and key the key
	// as the caller named it. The call then runs with the context StartCall
	// returns, which must derive from ctx: the call's node requests, its
	// Events and, for Do, the Lease and the context fn receives derive from
	// it. The Client calls the returned function exactly once, when the call
	// returns, with the Lock it returns (Acquire, Extend; nil otherwise) and
	// its error (nil for a Do whose fn panicked: the panic goes on after
	// it). Like Observe, both must be quick.
	StartCall(ctx context.Context, op Op, key string) (context.Context, func(*Lock, error))
	// ObserveContext receives each Event in place of Observe, with the
	// context of the operation: the one StartCall returned for the call the
	// Event belongs to, or a Lease's context for OpLost.
	ObserveContext(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to an Observer.
type ObserverFunc func(Event)

// Observe calls f(e).
func (f ObserverFunc) Observe(e Event) { f(e) }

// eventLevel is the level an Event is logged at: see observe.
func eventLevel(op Op, ok bool) slog.Level {
	switch {
	case op == OpOutage && ok:
		return slog.LevelInfo
	case !ok && op != OpAcquire:
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// wantsEvent reports whether an Event of op would reach anyone: an Observer
// (or Tracer) is set, or the logger is enabled at the Event's level. When
// not, the Event is not built at all: no copy of the node results, no error
// value, on every operation of a Client nobody watches.
func (c config) wantsEvent(ctx context.Context, op Op, ok bool) bool {
	return c.observer != nil || c.logger.Enabled(ctx, eventLevel(op, ok))
}

// observe logs ev and hands it to the observer. Acquire attempts, successful
// extensions and releases are logged at debug level (failed acquire attempts
// are the normal result of contention); failed extensions and releases, lost
// locks and the start of an outage at warn level, its end at info level.
func (c config) observe(ctx context.Context, ev Event) {
	level := eventLevel(ev.Op, ev.OK)
	if c.logger.Enabled(ctx, level) {
		c.logger.LogAttrs(ctx, level, logMessage(ev), eventAttrs(ev)...)
	}
	if t, ok := c.observer.(Tracer); ok {
		t.ObserveContext(ctx, ev)
	} else if c.observer != nil {
		c.observer.Observe(ev)
	}
}

// startCall tells a Tracer that a call begins (see Tracer.StartCall).
func (c config) startCall(ctx context.Context, op Op, key string) (context.Context, func(*Lock, error)) {
	if t, ok := c.observer.(Tracer); ok {
		return t.StartCall(ctx, op, key)
	}
	return ctx, func(*Lock, error) {}
}

func logMessage(ev Event) string {
	switch {
	case ev.Op == OpLost:
		return "redlock: lock lost"
	case ev.Op == OpOutage && ev.OK:
		return "redlock: a majority of the nodes answers again"
	case ev.Op == OpOutage:
		return "redlock: no majority of the nodes answers; waiting"
	case ev.OK:
		return "redlock: " + string(ev.Op)
	case ev.Op == OpAcquire:
		return "redlock: acquire attempt failed"
	}
	return "redlock: " + string(ev.Op) + " failed"
}

// eventAttrs renders an Event for a log line. Node names are addresses (or
// names the user gave); errors name nodes and outcomes, never owner values or
// passwords.
func eventAttrs(ev Event) []slog.Attr {
	attrs := []slog.Attr{slog.String("key", keyAttr(ev.Key))}
	if ev.Op != OpLost {
		attrs = append(attrs,
			slog.Bool("ok", ev.OK),
			slog.Int("granted", ev.Granted),
			slog.Int("quorum", ev.Quorum),
			slog.Duration("elapsed", ev.Latency))
	}
	if ev.Op == OpAcquire || ev.Op == OpExtend {
		attrs = append(attrs, slog.Duration("validity", ev.Validity), slog.Duration("drift", ev.Drift))
	}
	if ev.Nodes != nil {
		attrs = append(attrs, slog.String("nodes", nodeSummary(ev.Nodes)))
	}
	if ev.Err != nil {
		attrs = append(attrs, slog.String("err", ev.Err.Error()))
	}
	return attrs
}

// nodeSummary lists every node's outcome and latency:
// "127.0.0.1:7001/0=granted(1.2ms) 127.0.0.1:7002/0=timed-out".
func nodeSummary(rs []NodeResult) string {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(r.Node)
		b.WriteByte('=')
		b.WriteString(r.Outcome.String())
		if r.Latency > 0 {
			fmt.Fprintf(&b, "(%v)", r.Latency.Round(10*time.Microsecond))
		}
	}
	return b.String()
}

// quorumFields returns what an Event reports from an operation's error: the
// granted count and node outcomes of a *QuorumError.
func quorumFields(err error) (granted int, nodes []NodeResult) {
	var qe *QuorumError
	if errors.As(err, &qe) {
		return qe.Granted, qe.Nodes
	}
	return 0, nil
}

// observeAttempt reports one acquisition attempt. Err is the same
// *QuorumError the attempt returns when it failed.
func (c *Client) observeAttempt(ctx context.Context, cfg config, key string, ok bool, t *tally, elapsed, validity, ttl time.Duration, cause error) {
	if !cfg.wantsEvent(ctx, OpAcquire, ok) {
		return
	}
	ev := Event{
		Op: OpAcquire, Key: key, OK: ok, Granted: t.granted, Quorum: c.quorum,
		Latency: elapsed, Validity: validity, Drift: Drift(ttl, cfg.driftFactor), Nodes: slices.Clone(t.results),
	}
	if !ok {
		if cause == nil {
			cause = ctx.Err()
		}
		ev.Err = newQuorumError(OpAcquire, key, c.quorum, t, ErrNotAcquired, cause)
	}
	cfg.observe(ctx, ev)
}

// observeOutage reports that an Acquire call waits out an outage: qe is its
// last attempt's error, which found no majority answering, lasted how long
// the call has seen none.
func (c *Client) observeOutage(ctx context.Context, cfg config, key string, qe *QuorumError, lasted time.Duration) {
	if !cfg.wantsEvent(ctx, OpOutage, false) {
		return
	}
	err := *qe // Acquire may still add a cause to qe
	err.Nodes = slices.Clone(qe.Nodes)
	cfg.observe(ctx, Event{
		Op: OpOutage, Key: key, Granted: qe.Granted, Quorum: c.quorum,
		Latency: lasted, Nodes: err.Nodes, Err: &err,
	})
}

// observeOutageEnd reports that an Acquire call found a majority answering
// (nodes) after an outage it reported, which lasted how long.
func (c *Client) observeOutageEnd(ctx context.Context, cfg config, key string, nodes []NodeResult, lasted time.Duration) {
	if !cfg.wantsEvent(ctx, OpOutage, true) {
		return
	}
	granted := 0
	for _, n := range nodes {
		if n.Outcome == OutcomeGranted {
			granted++
		}
	}
	cfg.observe(ctx, Event{
		Op: OpOutage, Key: key, OK: true, Granted: granted, Quorum: c.quorum,
		Latency: lasted, Nodes: slices.Clone(nodes),
	})
}

// observeOp reports an extension or a release. Calls rejected before any
// round trip for bad arguments or a closed client are not reported; an
// extension refused because the validity had run out is.
func (l *Lock) observeOp(ctx context.Context, op Op, start time.Time, ttl time.Duration, t *tally, next *Lock, err error) {
	if errors.Is(err, ErrInvalidArgument) || errors.Is(err, ErrClosed) || !l.cfg.wantsEvent(ctx, op, err == nil) {
		return
	}
	ev := Event{Op: op, Key: l.key, OK: err == nil, Quorum: l.client.quorum, Latency: time.Since(start), Err: err}
	if t != nil {
		ev.Granted, ev.Nodes = t.granted, slices.Clone(t.results)
	}
	if op == OpExtend {
		ev.Drift = Drift(ttl, l.cfg.driftFactor)
		if next != nil {
			ev.Validity = next.validUntil.Sub(next.acquiredAt)
		}
	}
	l.cfg.observe(ctx, ev)
}
