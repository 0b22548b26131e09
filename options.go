package redlock

// Options of a Client and of one call, validated where they are applied.

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"time"
)

// Option configures a Client (New, Dial) or one call (Acquire, TryAcquire,
// Do, ...). An option given bad values makes the call return
// ErrInvalidArgument. The options of a Lease alone are HoldOptions.
type Option func(*config) error

// HoldOption configures how a Lease keeps a lock: WithExtendInterval and
// WithMaxHold. Lock.KeepAlive and MultiLock.KeepAlive take only HoldOptions;
// Do and the other calls that both acquire and hold take both kinds (see
// DoOption); Acquire takes none. An option given bad values makes the call
// return ErrInvalidArgument.
type HoldOption func(*holdConfig) error

// DoOption is an option of a call that both acquires a lock and keeps it
// (Client.Do, Client.DoMulti, Semaphore.Do, Campaign, Lead) or checks both
// (CheckTTL): every Option and every HoldOption is one, so that
//
//	c.Do(ctx, key, ttl, fn, redlock.WithFencing(true), redlock.WithMaxHold(time.Minute))
//
// mixes them. The Options set the acquisition and the Lease's extensions,
// the HoldOptions the Lease. They apply in order. No other type is one.
type DoOption interface {
	// applyTo sets an Option's field of c, or a HoldOption's of h.
	applyTo(c *config, h *holdConfig) error
}

func (o Option) applyTo(c *config, _ *holdConfig) error {
	if o == nil {
		return errNilOption
	}
	return o(c)
}

func (o HoldOption) applyTo(_ *config, h *holdConfig) error {
	if o == nil {
		return errNilOption
	}
	return o(h)
}

var errNilOption = fmt.Errorf("%w: nil option", ErrInvalidArgument)

// applyOptions applies opts in order, the one option loop of every call: a
// nil option or an option's own error (which wraps ErrInvalidArgument) stops
// it. h may be nil when O is Option, c when O is HoldOption.
func applyOptions[O DoOption](opts []O, c *config, h *holdConfig) error {
	for _, o := range opts {
		if DoOption(o) == nil {
			return errNilOption
		}
		if err := o.applyTo(c, h); err != nil {
			return err
		}
	}
	return nil
}

// apply applies the Options opts to cfg (see applyOptions).
func (cfg *config) apply(opts []Option) error { return applyOptions(opts, cfg, nil) }

type config struct {
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the TTL, see defaultNodeTimeout
	retry       RetryPolicy
	prefix      string
	owner       func() (string, error)
	fencing     bool
	quarantine  time.Duration // amnesia guard; 0: off (WithoutAmnesiaGuard)
	outageLimit time.Duration // how long Acquire waits out no majority; 0: no limit
	retention   time.Duration // of each key's counter and epoch (WithRetention)
	minHold     time.Duration // WithMinHold (minhold.go); 0: none
	logger      *slog.Logger
	observer    Observer // nil: none (observe.go)

	mutant mutantKnobs // chaos mutant hook: none but in the harness's mutants (mutants_on.go)
}

func defaultConfig() config {
	return config{
		driftFactor: DefaultDriftFactor,
		retry:       DefaultRetry(),
		owner:       RandomOwner,
		fencing:     true,
		quarantine:  DefaultQuarantine,
		outageLimit: DefaultOutageLimit,
		retention:   DefaultRetention,
		logger:      slog.New(slog.DiscardHandler),
	}
}

// checkLock reports an error when a lock of ttl cannot be taken or kept
// with these options: the TTL leaves no validity after one per-node timeout
// and the drift (checkTTL), or the retention is shorter than it or than the
// quarantine (checkRetention).
func (c config) checkLock(ttl time.Duration) error {
	if err := checkTTL(ttl, c.driftFactor, c.timeoutFor(ttl)); err != nil {
		return err
	}
	return c.checkRetention(ttl)
}

// checkRetention reports an error when the retention is shorter than the
// quarantine or than ttl: the bookkeeping must outlive every lock and every
// quarantine, or a key could look brand new while it is held. ttl 0 checks
// the quarantine only.
func (c config) checkRetention(ttl time.Duration) error {
	if c.retention < c.quarantine {
		return fmt.Errorf("%w: retention %v is shorter than the quarantine %v (WithQuarantine; the amnesia guard is on by default)", ErrInvalidArgument, c.retention, c.quarantine)
	}
	if c.retention < ttl {
		return fmt.Errorf("%w: ttl %v is longer than the retention %v (WithRetention)", ErrInvalidArgument, ttl, c.retention)
	}
	return nil
}

func (c config) timeoutFor(ttl time.Duration) time.Duration {
	if c.nodeTimeout > 0 {
		return c.nodeTimeout
	}
	return defaultNodeTimeout(ttl)
}

// WithDriftFactor sets the clock drift factor (default 0.01, the Redlock
// spec's). The drift allowance is ttl × factor + 2 ms. The factor must be in
// [0, 1).
func WithDriftFactor(factor float64) Option {
	return func(c *config) error {
		if !(factor >= 0 && factor < 1) {
			return fmt.Errorf("%w: drift factor %g must be in [0, 1)", ErrInvalidArgument, factor)
		}
		c.driftFactor = factor
		return nil
	}
}

// WithNodeTimeout sets how long one node may take to answer one operation
// before its vote counts as timed out. It must be positive (else
// ErrInvalidArgument), and every TTL used must leave at least 1 ms of
// validity after it and the drift allowance: TTL − drift − timeout ≥ 1 ms
// (else the call returns ErrInvalidArgument naming the smallest usable TTL).
// Default: 1% of the TTL, within [100 ms, 1 s] (the Redlock spec suggests
// 5–50 ms for a 10 s TTL on a quiet network; the 100 ms floor holds on a
// busy 2-core client machine), so the shortest TTL with the defaults is
// 105 ms; set a shorter timeout for shorter TTLs.
//
// The timeout measures the node, not this client's own queue of commands
// waiting for a connection: see Node timeouts in the package doc.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: node timeout %v must be positive", ErrInvalidArgument, d)
		}
		c.nodeTimeout = d
		return nil
	}
}

// WithRetry sets the retry policy of Acquire (default DefaultRetry: retry
// with jittered backoff until the context ends). It must not be nil, nor hold
// a nil function or pointer (RetryFunc(nil)): ErrInvalidArgument.
func WithRetry(p RetryPolicy) Option {
	return func(c *config) error {
		if isNil(p) {
			return fmt.Errorf("%w: nil retry policy", ErrInvalidArgument)
		}
		if v, ok := p.(interface{ validate() error }); ok {
			if err := v.validate(); err != nil {
				return err
			}
		}
		c.retry = p
		return nil
	}
}

// WithKeyPrefix puts prefix in front of every key on the nodes, e.g.
// "lock:" makes Acquire(ctx, "report", …) set "lock:report".
func WithKeyPrefix(prefix string) Option {
	return func(c *config) error {
		c.prefix = prefix
		return nil
	}
}

// WithOwnerGenerator sets the function that makes each attempt's owner
// value (default RandomOwner). Values must be unique across all clients and
// attempts, or two clients could release each other's lock; an empty value
// is an error. A nil gen gives ErrInvalidArgument.
func WithOwnerGenerator(gen func() (string, error)) Option {
	return func(c *config) error {
		if isNil(gen) {
			return fmt.Errorf("%w: nil owner generator", ErrInvalidArgument)
		}
		c.owner = gen
		return nil
	}
}

// DefaultQuarantine is the amnesia guard's quarantine when none is set: one
// minute, at least the TTL of most locks (each call uses at least its own
// TTL). See WithQuarantine.
const DefaultQuarantine = time.Minute

// WithQuarantine sets the amnesia guard's quarantine (default
// DefaultQuarantine; the guard is on unless WithoutAmnesiaGuard): how long a
// node that lost a key's epoch does not count for that key
// (OutcomeQuarantined), unless a successful acquisition vouches for it
// sooner. Choose it at least as long as the longest TTL any client uses on
// these nodes (each call uses at least its own TTL). It also bounds the
// quarantine of a whole node whose incarnation changed (it restarted or was
// flushed): that node's votes do not count until its uptime and its
// marker's age reach the larger of d and the longest TTL this Client has
// used (ErrQuarantined). d must be positive and
// at most the retention (WithRetention): ErrInvalidArgument. See The amnesia
// guard in the package doc for what it guards against and what it costs.
func WithQuarantine(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("%w: quarantine %v must be positive (WithoutAmnesiaGuard turns the guard off)", ErrInvalidArgument, d)
		}
		c.quarantine = d
		return nil
	}
}

// WithoutAmnesiaGuard turns the amnesia guard (WithQuarantine) off: every
// node that sets the key counts, including one that restarted without its
// data and so forgot a lock it had granted. That is safe only when no node
// ever forgets a lock while it may be held: every node persists every write
// before it answers (appendonly yes with appendfsync always), or a node that
// lost its data is kept out of service for longer than the longest TTL any
// client uses. Redis's default, appendfsync everysec, can lose the last
// second of writes, and a node without persistence loses them all.
func WithoutAmnesiaGuard() Option {
	return func(c *config) error {
		c.quarantine = 0
		return nil
	}
}

// DefaultOutageLimit is how long Acquire goes on retrying while no majority
// of the nodes answers, when WithOutageLimit does not say otherwise: 30 s.
const DefaultOutageLimit = 30 * time.Second

// WithOutageLimit sets how long Acquire (and Do) retries while no majority
// of the nodes answers (default DefaultOutageLimit): once its attempts have
// found no majority answering for d, counted from the start of the first
// such attempt in a row, it returns a *QuorumError that matches both
// ErrNotAcquired and ErrNoQuorum, with every node's outcome in the last
// attempt. An attempt in which a majority answered (granted, taken or
// quarantined) ends the count. The call may go on for one more retry delay
// and attempt after d. The Observer (OpOutage) and the logger hear when a
// call starts waiting an outage out and when a majority answers again. 0
// means no limit: Acquire then retries until its context ends or its retry
// policy gives up. A negative d gives ErrInvalidArgument. TryAcquire makes
// one attempt whatever the limit.
func WithOutageLimit(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: outage limit %v must not be negative", ErrInvalidArgument, d)
		}
		c.outageLimit = d
		return nil
	}
}

// WithFencing turns fencing tokens on (the default) or off. With fencing on,
// each grant increments the key's counter on its node in the same atomic
// step; a second round trip (the token written back to a majority) is needed
// only when the granting nodes' counters disagree: after a node missed
// grants or re-created its counter, or on a key's first use when a node's
// clock differs from the client's by more than 25 ms (otherwise every node
// seeds the new counter with the client's proposed seed; docs/fencing.md).
// Off, Lock.Token is always 0 and no counter is kept.
func WithFencing(on bool) Option {
	return func(c *config) error {
		c.fencing = on
		return nil
	}
}

// DefaultRetention is how long a lock name's bookkeeping on a node (its
// fencing counter and amnesia guard epoch) is kept after the last grant,
// extension or write-back that touched it: one day.
const DefaultRetention = 24 * time.Hour

// WithRetention sets how long each lock name's fencing counter and epoch are
// kept on a node after they were last touched (default DefaultRetention), so
// that the nodes' memory is bounded by the names in use. It must be at least
// every TTL (Acquire and Extend return ErrInvalidArgument for a longer TTL)
// and at least the quarantine (WithQuarantine). Tokens still increase across
// a name's idle periods: a counter re-created after the retention starts from
// the node's clock in microseconds, above every earlier token unless a node
// clock went back by more than the retention (docs/fencing.md).
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return fmt.Errorf("%w: retention %v must be a positive whole number of milliseconds", ErrInvalidArgument, d)
		}
		c.retention = d
		return nil
	}
}

// WithLogger sets a structured logger. Debug logs every acquisition attempt,
// extension and release with its per-node outcomes; warn logs settings that
// weaken the lock, failed extensions and releases, and lost locks (see
// Lease). Given to New or Dial, it also gets each change of a node's health
// once (Client.Health): WARN when a node goes down or into quarantine, INFO
// when it recovers. Owner values and passwords are never logged. Default: no
// logging.
// It must not be nil, nor a Logger without a Handler (the zero slog.Logger):
// ErrInvalidArgument.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil || isNil(l.Handler()) {
			return fmt.Errorf("%w: nil logger or logger without a handler", ErrInvalidArgument)
		}
		c.logger = l
		return nil
	}
}

// RandomOwner returns 128 random bits from crypto/rand, base64-encoded: the
// default owner value, unguessable and unique with overwhelming probability.
func RandomOwner() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("redlock: owner value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// WithExtendInterval sets how often a Lease (KeepAlive, Do, DoMulti) extends its
// lock: every d, counted from the start of the previous acquisition or
// extension. Default: a third of the TTL, so that the lock still has about
// two thirds of its validity when an extension starts. d must be positive
// (else ErrInvalidArgument from the option) and below the validity of a fresh
// lock, ttl − drift (else KeepAlive and Do return ErrInvalidArgument). A
// nested Lease (see Reentrancy) does not extend: the outer one does.
func WithExtendInterval(d time.Duration) HoldOption {
	return func(h *holdConfig) error {
		if d <= 0 {
			return fmt.Errorf("%w: extension interval %v must be positive", ErrInvalidArgument, d)
		}
		h.interval = d
		return nil
	}
}

// WithMaxHold limits how long a Lease (KeepAlive, Do, DoMulti) keeps its lock: d
// after KeepAlive was called, it stops extending and ends its context with a
// cause wrapping ErrHoldLimit. With KeepAlive the keys then expire at their
// TTL unless released first. Do releases the lock at once, at the limit,
// even if its function ignores its context and keeps running; a nested Do
// (see Reentrancy) ends its function's context and leaves the lock to the
// outer holder. 0 means no limit (the default); a negative d gives
// ErrInvalidArgument.
func WithMaxHold(d time.Duration) HoldOption {
	return func(h *holdConfig) error {
		if d < 0 {
			return fmt.Errorf("%w: maximum hold time %v must not be negative", ErrInvalidArgument, d)
		}
		h.maxHold = d
		return nil
	}
}

// WithObserver sets an Observer that receives an Event for every acquisition
// attempt, extension, release and lost lock: a hook for metrics such as
// attempt latency, votes, validity margin and lost locks. Default: none. It
// must not be nil, nor hold a nil function or pointer (ObserverFunc(nil)):
// ErrInvalidArgument.
func WithObserver(o Observer) Option {
	return func(c *config) error {
		if isNil(o) {
			return fmt.Errorf("%w: nil observer", ErrInvalidArgument)
		}
		c.observer = o
		return nil
	}
}

// WithMinHold makes Release leave the lock taken until d after it was
// acquired (AcquiredAt of the acquisition, not of an extension), even when
// the work ended sooner, but never past the released handle's ValidUntil (a
// Lease's latest). Until then Release shortens the keys, where they still
// hold this lock's owner value, to expire at that time (never lengthening
// them) instead of deleting them, with a delete's results and waiting; the
// lock's Validity ends at once. Waiters find the lock free at their next
// retry (no release message). For Acquire, TryAcquire and Do.
//
// Hosts that run one schedule and take the lock per tick then run a short
// job once per tick: a host whose tick fires up to d after the first one's
// finds the lock taken. The skew tolerated is the smaller of d and the
// period minus d. 0, the default, is no hold. A negative d, or one longer
// than the TTL (from Acquire, TryAcquire, Do, CheckTTL), gives
// ErrInvalidArgument.
func WithMinHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: minimum hold %v must not be negative", ErrInvalidArgument, d)
		}
		c.minHold = d
		return nil
	}
}

// applyOnly applies opts to cfg as apply does, and returns ErrInvalidArgument
// naming the first option that sets anything but the fields allowed says
// may be set (a call that would ignore it: Leader, WatchLeader). Each option
// is first tried on two probes whose fields all differ, so that setting a
// field shows on at least one of them whatever the value.
func (cfg *config) applyOnly(opts []Option, call string, allowed func(probe, was *config)) error {
	for _, o := range opts {
		if o == nil {
			return errNilOption
		}
		for _, p := range [2]config{probeConfig(-1, false), probeConfig(-2, true)} {
			was := p
			if err := o(&p); err != nil {
				return err
			}
			allowed(&p, &was)
			if !sameSettings(&p, &was) {
				return fmt.Errorf("%w: %s does not use %s", ErrInvalidArgument, call, optionName(o))
			}
		}
	}
	return cfg.apply(opts)
}

// probeConfig is a config whose every field holds a value no option sets
// (durations and the drift factor d, nil functions and interfaces), with
// fencing as given.
func probeConfig(d time.Duration, fencing bool) config {
	return config{
		driftFactor: float64(d), nodeTimeout: d, prefix: "\x00probe", fencing: fencing,
		quarantine: d, outageLimit: d, retention: d, minHold: d,
	}
}

// sameSettings reports whether a and b hold the same settings (the chaos
// harness's mutant hook aside); functions and interfaces are compared by
// being set.
func sameSettings(a, b *config) bool {
	return a.driftFactor == b.driftFactor && a.nodeTimeout == b.nodeTimeout && a.prefix == b.prefix &&
		a.fencing == b.fencing && a.quarantine == b.quarantine && a.outageLimit == b.outageLimit &&
		a.retention == b.retention && a.minHold == b.minHold &&
		(a.retry == nil) == (b.retry == nil) && (a.owner == nil) == (b.owner == nil) &&
		(a.logger == nil) == (b.logger == nil) && (a.observer == nil) == (b.observer == nil)
}

// optionName names the constructor that made o ("WithRetry"), or says "an
// option" when it cannot tell.
func optionName(o Option) string {
	f := runtime.FuncForPC(reflect.ValueOf(o).Pointer())
	if f == nil {
		return "an option"
	}
	// "github.com/d3b93e30/redlock.WithRetry.func1", or with the caller's
	// name in front when the constructor was inlined:
	// "example.com/app.run.WithRetry.func2", "example.com/app.run.func1.WithRetry.1".
	parts := strings.Split(f.Name(), ".")
	for i := len(parts) - 1; i >= 0; i-- {
		if strings.HasPrefix(parts[i], "func") || strings.HasPrefix(parts[i], "gowrap") || strings.Trim(parts[i], "0123456789") == "" {
			continue // a closure's own name: func1, or 1 inside another closure
		}
		if strings.HasPrefix(parts[i], "With") {
			return parts[i]
		}
		break
	}
	return "an option"
}
