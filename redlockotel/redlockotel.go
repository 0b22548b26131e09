// Package redlockotel reports the operations of a redlock Client as
// OpenTelemetry metrics and trace spans, as redisotel does for go-redis.
// Create an Observer with New and give it to the Client:
//
//	obs, err := redlockotel.New() // the global MeterProvider and TracerProvider
//	...
//	c, err := redlock.Dial(urls, redlock.WithObserver(obs))
//
// Every Acquire, Extend, Release and Do of that Client is then measured, and
// traced as a span that is a child of the span in the caller's context. The
// node requests of a call run with the call's span in their context, so the
// spans of an instrumented go-redis client (redisotel) nest below it.
//
// # Metrics
//
// Names follow the OpenTelemetry semantic conventions where they define the
// thing measured (error.type, server.address, server.port, durations in
// seconds), with a "redlock." prefix where they do not. The outcome of an
// operation is its error.type attribute, absent on success (see ErrorType).
//
//	redlock.operations            counter    {operation}  one per call: redlock.operation.name, error.type
//	redlock.operation.duration    histogram  s            one per call: redlock.operation.name, error.type
//	redlock.acquire.attempts      histogram  {attempt}    attempts per Acquire call: error.type
//	redlock.lock.validity         histogram  s            validity time of each acquisition and extension: redlock.operation.name
//	redlock.nodes.granted         histogram  {node}       nodes that applied each acquire attempt, extension, release: redlock.operation.name
//	redlock.node.outcomes         counter    {outcome}    per node and operation: redlock.operation.name, redlock.node.outcome, server.address, server.port
//	redlock.leases.lost           counter    {lease}      Leases (and Do calls) that lost their lock: error.type (lock_lost, hold_limit)
//
// RegisterHealth adds two gauges of a Client's view of its nodes
// (redlock.Client.Health), read at each collection:
//
//	redlock.node.state             gauge  {node}  1 for each node's state, 0 for the others: redlock.node.state, server.address, server.port
//	redlock.node.quarantine.left   gauge  s       how long each node's quarantine still lasts (0: none): server.address, server.port
//
// redlock.operation.name is acquire, extend, release or do; an Acquire call
// counts once however many attempts it made (redlock.nodes.granted and
// redlock.node.outcomes count each attempt). The key never appears in a metric.
//
// # Spans
//
// Spans are named redlock.acquire, redlock.extend, redlock.release and
// redlock.do (kind internal). They carry redlock.quorum, redlock.nodes.granted
// and redlock.nodes.failed (each node that did not apply the last attempt or
// operation, as "node=outcome") and, when the call failed, error.type and an
// error status. An acquire span carries redlock.acquire.attempts,
// redlock.fencing.token on success, and one event "redlock.attempt" per
// attempt, and "redlock.outage" (redlock.outage.over false, then true) when
// it waits out an outage and when that ends (redlock.OpOutage); a do span
// gets an event "redlock.lease.lost" when its lock is lost.
// The key is recorded as set by WithKeyAttribute (hashed by default). Owner
// values, passwords and error messages (which name the key) are never
// recorded.
package redlockotel

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/d3b93e30/redlock"
)

// ScopeName is the instrumentation scope of the meter and tracer.
const ScopeName = "github.com/d3b93e30/redlock/redlockotel"

// Attribute keys this package defines (the others come from the semantic
// conventions: error.type, server.address, server.port, db.namespace).
const (
	OperationKey    = attribute.Key("redlock.operation.name")   // acquire, extend, release, do
	NodeOutcomeKey  = attribute.Key("redlock.node.outcome")     // redlock.Outcome.String(): granted, taken, timed-out...
	KeyKey          = attribute.Key("redlock.key")              // the key, with KeyPlain
	KeyHashKey      = attribute.Key("redlock.key.hash")         // the key's hash, with KeyHashed
	QuorumKey       = attribute.Key("redlock.quorum")           // votes needed: N/2+1
	GrantedKey      = attribute.Key("redlock.nodes.granted")    // nodes that applied the (last) attempt or operation
	FailedNodesKey  = attribute.Key("redlock.nodes.failed")     // "node=outcome" of the nodes that did not
	AttemptsKey     = attribute.Key("redlock.acquire.attempts") // attempts one Acquire call made
	AttemptKey      = attribute.Key("redlock.attempt")          // an attempt event's number: 1, 2, ...
	FencingTokenKey = attribute.Key("redlock.fencing.token")    // the token of the lock acquired or extended
	ValidityKey     = attribute.Key("redlock.lock.validity")    // an attempt event's validity time, in seconds
	OutageOverKey   = attribute.Key("redlock.outage.over")      // an outage event's: false when it starts, true when it ends
	NodeStateKey    = attribute.Key("redlock.node.state")       // redlock.HealthState.String(): unknown, up, down, quarantined
)

// Span event names.
const (
	attemptEventName = "redlock.attempt"    // one per acquisition attempt, on the acquire span
	lostEventName    = "redlock.lease.lost" // a Lease lost its lock, on the do span (or the caller's)
	outageEventName  = "redlock.outage"     // Acquire waits an outage out, or it ended, on the acquire span
)

// KeyMode says how spans record the lock key.
type KeyMode int

const (
	// KeyHashed records redlock.key.hash: the first 16 hex digits of the
	// key's SHA-256. It lets spans of one key be found together without
	// showing it, but a key that can be guessed (a client ID) can be found
	// by hashing guesses: use KeyOff for those.
	KeyHashed KeyMode = iota
	// KeyOff records nothing about the key.
	KeyOff
	// KeyPlain records the key as redlock.key.
	KeyPlain
)

// Option configures New.
type Option func(*config) error

type config struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	keys    KeyMode
}

// WithMeterProvider sets where metrics go. Default: otel.GetMeterProvider()
// when New is called. It must not be nil.
func WithMeterProvider(p metric.MeterProvider) Option {
	return func(c *config) error {
		if p == nil {
			return fmt.Errorf("%w: nil meter provider", redlock.ErrInvalidArgument)
		}
		c.meters = p
		return nil
	}
}

// WithTracerProvider sets where spans go. Default: otel.GetTracerProvider()
// when New is called. It must not be nil.
func WithTracerProvider(p trace.TracerProvider) Option {
	return func(c *config) error {
		if p == nil {
			return fmt.Errorf("%w: nil tracer provider", redlock.ErrInvalidArgument)
		}
		c.tracers = p
		return nil
	}
}

// WithKeyAttribute sets how spans record the lock key (default KeyHashed).
func WithKeyAttribute(m KeyMode) Option {
	return func(c *config) error {
		if m < KeyHashed || m > KeyPlain {
			return fmt.Errorf("%w: key mode %d", redlock.ErrInvalidArgument, m)
		}
		c.keys = m
		return nil
	}
}

// Observer turns a redlock Client's events into metrics and spans. It
// implements redlock.Tracer; give it to redlock.WithObserver (on the Client,
// or on one call). It is safe for concurrent use, and one Observer may serve
// many Clients.
type Observer struct {
	tracer trace.Tracer
	keys   KeyMode

	operations metric.Int64Counter
	duration   metric.Float64Histogram
	attempts   metric.Int64Histogram
	validity   metric.Float64Histogram
	granted    metric.Int64Histogram
	outcomes   metric.Int64Counter
	lost       metric.Int64Counter

	nodeAttrs sync.Map // node name → []attribute.KeyValue

	meter metric.Meter // for RegisterHealth's gauges
}

var _ redlock.Tracer = (*Observer)(nil)

// New returns an Observer that records to the configured providers. It
// returns an error wrapping redlock.ErrInvalidArgument for a bad option, or
// the meter's error if an instrument cannot be created.
func New(opts ...Option) (*Observer, error) {
	cfg := config{meters: otel.GetMeterProvider(), tracers: otel.GetTracerProvider()}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", redlock.ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	m := cfg.meters.Meter(ScopeName)
	o := &Observer{tracer: cfg.tracers.Tracer(ScopeName), keys: cfg.keys, meter: m}
	var errs [7]error
	o.operations, errs[0] = m.Int64Counter("redlock.operations",
		metric.WithUnit("{operation}"),
		metric.WithDescription("Acquire, Extend, Release and Do calls, by operation and error.type (absent on success)."))
	o.duration, errs[1] = m.Float64Histogram("redlock.operation.duration",
		metric.WithUnit("s"),
		metric.WithDescription("Duration of Acquire (all attempts and waits), Extend, Release and Do calls."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60))
	o.attempts, errs[2] = m.Int64Histogram("redlock.acquire.attempts",
		metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts made by one Acquire call."),
		metric.WithExplicitBucketBoundaries(1, 2, 3, 4, 5, 10, 20, 50, 100))
	o.validity, errs[3] = m.Float64Histogram("redlock.lock.validity",
		metric.WithUnit("s"),
		metric.WithDescription("Validity time (TTL − elapsed − clock drift) a lock had when acquired or extended."),
		metric.WithExplicitBucketBoundaries(0, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
	o.granted, errs[4] = m.Int64Histogram("redlock.nodes.granted",
		metric.WithUnit("{node}"),
		metric.WithDescription("Nodes that applied an acquire attempt, an extension or a release."),
		metric.WithExplicitBucketBoundaries(0, 1, 2, 3, 4, 5, 6, 7, 8, 9))
	o.outcomes, errs[5] = m.Int64Counter("redlock.node.outcomes",
		metric.WithUnit("{outcome}"),
		metric.WithDescription("Each node's answer to each acquire attempt, extension and release."))
	o.lost, errs[6] = m.Int64Counter("redlock.leases.lost",
		metric.WithUnit("{lease}"),
		metric.WithDescription("Leases (KeepAlive, Do) that stopped trusting their lock or reached their hold limit."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return o, nil
}

// callKey finds the state of the call a context belongs to.
type callKey struct{}

// call is the state of one traced call, from StartCall to its end.
type call struct {
	op    redlock.Op
	start time.Time
	span  trace.Span

	mu       sync.Mutex
	attempts int
	last     *redlock.Event // the last acquire attempt, extension or release
}

// StartCall opens the call's span as a child of the span in ctx and returns
// a context that carries it (see redlock.Tracer). The returned function ends
// the span and records the call's metrics.
func (o *Observer) StartCall(ctx context.Context, op redlock.Op, key string) (context.Context, func(*redlock.Lock, error)) {
	var attrs []attribute.KeyValue
	switch o.keys {
	case KeyHashed:
		sum := sha256.Sum256([]byte(key))
		attrs = append(attrs, KeyHashKey.String(hex.EncodeToString(sum[:8])))
	case KeyPlain:
		attrs = append(attrs, KeyKey.String(key))
	}
	ctx, span := o.tracer.Start(ctx, "redlock."+string(op), trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	c := &call{op: op, start: time.Now(), span: span}
	ctx = context.WithValue(ctx, callKey{}, c)
	return ctx, func(l *redlock.Lock, err error) { o.endCall(ctx, c, l, err) }
}

func (o *Observer) endCall(ctx context.Context, c *call, l *redlock.Lock, err error) {
	elapsed := time.Since(c.start)
	opAttr := OperationKey.String(string(c.op))
	errType := ErrorType(err)
	callAttrs := []attribute.KeyValue{opAttr}
	if errType != "" {
		callAttrs = append(callAttrs, semconv.ErrorTypeKey.String(errType))
	}
	o.operations.Add(ctx, 1, metric.WithAttributes(callAttrs...))
	o.duration.Record(ctx, elapsed.Seconds(), metric.WithAttributes(callAttrs...))

	c.mu.Lock()
	attempts, last := c.attempts, c.last
	c.mu.Unlock()
	var spanAttrs []attribute.KeyValue
	if c.op == redlock.OpAcquire {
		n := attempts
		if l != nil {
			n = l.Attempts()
		} else if qe := (*redlock.QuorumError)(nil); errors.As(err, &qe) {
			n = qe.Attempts
		}
		if n > 0 {
			var a []attribute.KeyValue
			if errType != "" {
				a = append(a, semconv.ErrorTypeKey.String(errType))
			}
			o.attempts.Record(ctx, int64(n), metric.WithAttributes(a...))
		}
		spanAttrs = append(spanAttrs, AttemptsKey.Int(n))
	}
	if last != nil {
		spanAttrs = append(spanAttrs, QuorumKey.Int(last.Quorum), GrantedKey.Int(last.Granted))
		if failed := failedNodes(last.Nodes); len(failed) > 0 {
			spanAttrs = append(spanAttrs, FailedNodesKey.StringSlice(failed))
		}
	}
	if l != nil && l.Token() > 0 {
		spanAttrs = append(spanAttrs, FencingTokenKey.Int64(int64(l.Token())))
	}
	if errType != "" {
		spanAttrs = append(spanAttrs, semconv.ErrorTypeKey.String(errType))
		// Not err.Error(): redlock's messages quote the key.
		c.span.SetStatus(codes.Error, errType)
	}
	c.span.SetAttributes(spanAttrs...)
	c.span.End()
}

// Observe records the metrics that one Event gives (redlock.nodes.granted,
// redlock.node.outcomes, redlock.lock.validity, redlock.leases.lost). The
// Client calls ObserveContext instead; Observe serves an Observer that wraps
// this one without being a Tracer, which gets neither spans nor the per-call
// metrics (redlock.operations, redlock.operation.duration,
// redlock.acquire.attempts).
func (o *Observer) Observe(e redlock.Event) { o.ObserveContext(context.Background(), e) }

// ObserveContext records e's metrics and adds what it says to the span of
// the call in ctx (see redlock.Tracer).
func (o *Observer) ObserveContext(ctx context.Context, e redlock.Event) {
	opAttr := OperationKey.String(string(e.Op))
	if e.Op == redlock.OpLost {
		errType := ErrorType(e.Err)
		o.lost.Add(ctx, 1, metric.WithAttributes(semconv.ErrorTypeKey.String(errType)))
		// The Lease's context carries the span of the Do call (or the
		// caller's span for KeepAlive); Lease events may come from another
		// goroutine, and spans are safe for that.
		trace.SpanFromContext(ctx).AddEvent(lostEventName, trace.WithAttributes(semconv.ErrorTypeKey.String(errType)))
		return
	}
	if e.Op == redlock.OpOutage {
		// The attempts' own events count the nodes' outcomes.
		trace.SpanFromContext(ctx).AddEvent(outageEventName, trace.WithAttributes(OutageOverKey.Bool(e.OK)))
		return
	}
	o.granted.Record(ctx, int64(e.Granted), metric.WithAttributes(opAttr))
	for _, r := range e.Nodes {
		attrs := append([]attribute.KeyValue{opAttr, NodeOutcomeKey.String(r.Outcome.String())}, o.nodeAttributes(r.Node)...)
		o.outcomes.Add(ctx, 1, metric.WithAttributes(attrs...))
	}
	if e.OK && (e.Op == redlock.OpAcquire || e.Op == redlock.OpExtend) {
		o.validity.Record(ctx, e.Validity.Seconds(), metric.WithAttributes(opAttr))
	}

	c, _ := ctx.Value(callKey{}).(*call)
	if c == nil || c.op != e.Op {
		return
	}
	c.mu.Lock()
	c.last = &e
	c.attempts += boolInt(e.Op == redlock.OpAcquire)
	n := c.attempts
	c.mu.Unlock()
	if e.Op != redlock.OpAcquire {
		return
	}
	attrs := []attribute.KeyValue{
		AttemptKey.Int(n), GrantedKey.Int(e.Granted), QuorumKey.Int(e.Quorum),
		ValidityKey.Float64(e.Validity.Seconds()),
	}
	if failed := failedNodes(e.Nodes); len(failed) > 0 {
		attrs = append(attrs, FailedNodesKey.StringSlice(failed))
	}
	if !e.OK {
		attrs = append(attrs, semconv.ErrorTypeKey.String(ErrorType(e.Err)))
	}
	c.span.AddEvent(attemptEventName, trace.WithAttributes(attrs...))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// failedNodes lists "node=outcome" for each node that did not apply the
// operation.
func failedNodes(rs []redlock.NodeResult) []string {
	var out []string
	for _, r := range rs {
		if r.Outcome != redlock.OutcomeGranted {
			out = append(out, r.Node+"="+r.Outcome.String())
		}
	}
	return out
}

// nodeAttributes returns server.address and server.port for a node named
// "host:port/db" (as redlock names the nodes it dials, and go-redis clients
// passed to redlock.New), with db.namespace for the database index. Other
// names (a cluster, a name the user chose) become server.address whole.
func (o *Observer) nodeAttributes(name string) []attribute.KeyValue {
	if v, ok := o.nodeAttrs.Load(name); ok {
		return v.([]attribute.KeyValue)
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(name)}
	addr, db, _ := strings.Cut(name, "/")
	if host, p, err := net.SplitHostPort(addr); err == nil {
		if port, err := strconv.Atoi(p); err == nil {
			attrs = []attribute.KeyValue{semconv.ServerAddress(host), semconv.ServerPort(port)}
			if db != "" {
				attrs = append(attrs, semconv.DBNamespace(db))
			}
		}
	}
	o.nodeAttrs.Store(name, attrs)
	return attrs
}

// ErrorType returns the error.type an error is recorded with: "" for nil;
// for redlock's errors, in this order, "lock_lost" (redlock.ErrLockLost),
// "hold_limit", "not_acquired", "not_held", "no_quorum",
// "invalid_argument", "closed"; then "canceled" and "deadline_exceeded" for
// context errors; otherwise "_OTHER" (an error of the function given to Do).
func ErrorType(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, redlock.ErrLockLost):
		return "lock_lost"
	case errors.Is(err, redlock.ErrHoldLimit):
		return "hold_limit"
	case errors.Is(err, redlock.ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, redlock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, redlock.ErrNoQuorum):
		return "no_quorum"
	case errors.Is(err, redlock.ErrInvalidArgument):
		return "invalid_argument"
	case errors.Is(err, redlock.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline_exceeded"
	}
	return semconv.ErrorTypeOther.Value.AsString()
}

// healthStates are the values of redlock.node.state.
var healthStates = []redlock.HealthState{redlock.HealthUnknown, redlock.HealthUp, redlock.HealthDown, redlock.HealthQuarantined}

// RegisterHealth reports c's view of its nodes (redlock.Client.Health) as
// the gauges redlock.node.state and redlock.node.quarantine.left (see
// Metrics), read from c at each collection, until the returned
// Registration is unregistered (do that before closing c; a closed Client
// keeps reporting what it last saw). It returns an error wrapping
// redlock.ErrInvalidArgument for a nil c, or the meter's error.
func (o *Observer) RegisterHealth(c *redlock.Client) (metric.Registration, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil Client", redlock.ErrInvalidArgument)
	}
	state, err1 := o.meter.Int64ObservableGauge("redlock.node.state",
		metric.WithUnit("{node}"),
		metric.WithDescription("1 for each node's state in the Client's health view (redlock.node.state), 0 for the other states."))
	left, err2 := o.meter.Float64ObservableGauge("redlock.node.quarantine.left",
		metric.WithUnit("s"),
		metric.WithDescription("How long each node's quarantine (amnesia guard) still lasts; 0 when it is not quarantined."))
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	return o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		now := time.Now()
		for _, h := range c.Health() {
			attrs := o.nodeAttributes(h.Node)
			for _, s := range healthStates {
				v := int64(0)
				if h.State == s {
					v = 1
				}
				withState := append(append(make([]attribute.KeyValue, 0, len(attrs)+1), attrs...), NodeStateKey.String(s.String()))
				obs.ObserveInt64(state, v, metric.WithAttributes(withState...))
			}
			secs := 0.0
			if h.QuarantinedUntil.After(now) {
				secs = h.QuarantinedUntil.Sub(now).Seconds()
			}
			obs.ObserveFloat64(left, secs, metric.WithAttributes(attrs...))
		}
		return nil
	}, state, left)
}
