// Package redlock is a mutual-exclusion lock held by a majority (quorum) of N
// independent Redis masters: the Redlock algorithm, with fencing tokens.
//
// A Client talks to N nodes. Acquire sets the lock key on every node at once
// and succeeds when a majority (N/2+1) granted it quickly enough that the
// lock's validity time, TTL − elapsed − clock drift, is still positive. The
// returned Lock is an immutable handle with that validity deadline, a fencing
// token that increases across successive holders of the key, and what each
// node answered. Release and Extend are owner-checked on every node.
//
// Redlock assumes bounded process pauses, network delays and clock drift
// (see docs/safety.md): a holder that pauses past its validity can overlap
// with the next holder. Pass the fencing token to the resource you protect so
// that it rejects the stale holder's writes (docs/fencing.md).
//
// Do runs a function under the lock, extending it while the function runs
// and ending the function's context the moment the lock can no longer be
// trusted; Lock.KeepAlive does the extending for a lock you hold yourself.
// Both are reentrant through the context (see Client.Acquire). The examples
// (ExampleClient_Do, ExampleLock_KeepAlive, ExampleClient_Acquire_reentrant)
// show each use.
//
// # Logs from go-redis
//
// The package logs only through WithLogger, and never by default. go-redis,
// which talks to the nodes, has its own process-wide logger that writes to
// the standard error: while a node is down it prints a line such as
// "redis: connection pool: failed to dial after 1 attempts: ... connection
// refused" for each failed connection. Every node's outcome is already in the
// errors (QuorumError) and Events this package returns, so you may silence
// those lines, or send them to your own logger, once at start-up:
//
//	redis.SetLogger(&logging.VoidLogger{}) // github.com/redis/go-redis/v9/logging
//
// or pass redis.SetLogger any value with a method
// Printf(ctx context.Context, format string, v ...any). It applies to every
// go-redis client in the process.
package redlock

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/mutation"
)

// Errors returned by the package. Test them with errors.Is; a *QuorumError
// (errors.As) carries the per-node outcomes behind ErrNotAcquired, ErrNotHeld
// and ErrNoQuorum.
var (
	// ErrInvalidArgument reports bad input: no nodes, a nil or duplicate
	// client, a malformed URL, an empty key, a TTL too short to leave
	// validity after the drift allowance and one per-node timeout (the
	// error names the smallest usable TTL), a negative factor or timeout,
	// a nil function or pointer given to an option.
	ErrInvalidArgument = errors.New("redlock: invalid argument")
	// ErrNotAcquired means Acquire gave up: another owner holds the key on too
	// many nodes, too few nodes answered, the validity time ran out during the
	// acquisition, or the context ended.
	ErrNotAcquired = errors.New("redlock: lock not acquired")
	// ErrNotHeld means Release or Extend found that this Lock is no longer
	// held: its validity ran out, or too many nodes report the key expired or
	// held by another owner.
	ErrNotHeld = errors.New("redlock: lock not held")
	// ErrNoQuorum means Release or Extend could not reach a majority of the
	// nodes, so the outcome is unknown. After a failed Extend the lock stays
	// valid until its previous deadline; after a failed Release the keys that
	// were not deleted expire at their TTL.
	ErrNoQuorum = errors.New("redlock: no quorum of nodes answered")
	// ErrClosed is returned by operations on a closed Client.
	ErrClosed = errors.New("redlock: client closed")
)

// QuorumError is the error of an operation that did not reach its quorum. It
// wraps one of ErrNotAcquired, ErrNotHeld or ErrNoQuorum and, when the
// caller's context ended, the context's error, so both
// errors.Is(err, ErrNotAcquired) and errors.Is(err, context.Canceled) hold.
type QuorumError struct {
	Op       string       // "acquire", "extend" or "release"
	Key      string       // the key as the caller named it (without prefix)
	Quorum   int          // votes needed: N/2+1
	Granted  int          // nodes on which the last attempt applied
	Attempts int          // attempts made (acquire only)
	Nodes    []NodeResult // each node's outcome in the last attempt, in node order
	Err      error        // ErrNotAcquired, ErrNotHeld or ErrNoQuorum
	Cause    error        // the context's error, or another reason; may be nil
}

// Error describes the failure and every node's outcome, without secrets.
func (e *QuorumError) Error() string {
	var b strings.Builder
	if len(e.Nodes) == 0 && e.Cause != nil {
		// Refused before any round trip (an Extend past the validity).
		fmt.Fprintf(&b, "%v: %s %q: %v; nothing sent", e.Err, e.Op, e.Key, e.Cause)
		return b.String()
	}
	fmt.Fprintf(&b, "%v: %s %q: applied on %d of %d nodes, %d needed", e.Err, e.Op, e.Key, e.Granted, len(e.Nodes), e.Quorum)
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (attempt %d)", e.Attempts)
	}
	if e.Cause != nil {
		fmt.Fprintf(&b, ": %v", e.Cause)
	}
	b.WriteString(" [")
	for i, n := range e.Nodes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s", n.Node, n.Outcome)
	}
	b.WriteString("]")
	return b.String()
}

// Unwrap returns the sentinel and, if set, the cause.
func (e *QuorumError) Unwrap() []error {
	if e.Cause == nil {
		return []error{e.Err}
	}
	return []error{e.Err, e.Cause}
}

// Option configures a Client (New, Dial) or one call (Acquire, TryAcquire).
// An option given bad values makes the call return ErrInvalidArgument.
type Option func(*config) error

type config struct {
	driftFactor float64
	nodeTimeout time.Duration // 0: derived from the TTL, see defaultNodeTimeout
	retry       RetryPolicy
	prefix      string
	owner       func() (string, error)
	fencing     bool
	quarantine  time.Duration // amnesia guard; 0: off
	retention   time.Duration // of each key's counter and epoch (WithRetention)
	logger      *slog.Logger
	observer    Observer   // nil: none (observe.go)
	hold        holdConfig // KeepAlive and Do (do.go)

	mutant *mutation.Knobs // chaos mutant hook: nil except in the chaos harness's mutants
}

func defaultConfig() config {
	return config{
		driftFactor: DefaultDriftFactor,
		retry:       DefaultRetry(),
		owner:       RandomOwner,
		fencing:     true,
		retention:   DefaultRetention,
		logger:      slog.New(slog.DiscardHandler),
	}
}

// checkRetention reports an error when the retention is shorter than the
// quarantine or than ttl: the bookkeeping must outlive every lock and every
// quarantine, or a key could look brand new while it is held. ttl 0 checks
// the quarantine only.
func (c config) checkRetention(ttl time.Duration) error {
	if c.retention < c.quarantine {
		return fmt.Errorf("%w: retention %v is shorter than the quarantine %v", ErrInvalidArgument, c.retention, c.quarantine)
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
// Default: 1% of the TTL, within [20 ms, 1 s] (the Redlock spec suggests
// 5–50 ms for a 10 s TTL), so the shortest TTL with the defaults is 24 ms;
// set a shorter timeout for shorter TTLs.
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

// WithQuarantine turns the amnesia guard on with the given quarantine
// (default 0: off). A node that restarts without its data forgets the locks
// it granted, and a second client can then win a majority (Kleppmann, "How to
// do distributed locking", 2016). With the guard, each node keeps a per-key
// epoch next to the lock key; when a node lost it, its votes for that key are
// not counted (outcome OutcomeQuarantined) until either a successful
// acquisition that reached it (however late its reply) vouches for it, or
// the quarantine has passed since the epoch was recreated. Choose the
// quarantine at least as long as the longest TTL any client uses on these
// nodes (by then every lock the node may have forgotten has expired); each
// call uses at least its own TTL; one minute is a good start. The guard
// holds while at most a minority of the nodes lose their data within one
// quarantine and, counting them, at most a minority is emptied or
// unreachable at once. Costs: one small hash per key and node (kept for the
// retention, see WithRetention), and on the first use of a key Acquire waits
// for every node's answer (or its per-node timeout), since only then can it
// tell a new key from a forgotten one (docs/fencing.md). It must not be
// negative nor longer than the retention.
func WithQuarantine(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: quarantine %v must not be negative", ErrInvalidArgument, d)
		}
		c.quarantine = d
		return nil
	}
}

// WithFencing turns fencing tokens on (the default) or off. With fencing on,
// each grant increments the key's counter on its node in the same atomic
// step; a second round trip (the token written back to a majority) is needed
// only when the granting nodes' counters disagree, as on a key's first use
// or after a node missed grants (docs/fencing.md). Off, Lock.Token is always
// 0 and no counter is kept.
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
// Lease). Owner values and passwords are never logged. Default: no logging.
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

// node is one Redis master.
type node struct {
	name   string
	client redis.Scripter
	closer func() error // nil for clients the user owns
}

// Client acquires locks on a fixed set of N independent Redis nodes. It is
// safe for concurrent use. Close it when done: it waits for calls still in
// flight and closes the connections it dialed itself.
type Client struct {
	nodes    []*node
	quorum   int
	cfg      config
	inflight sync.WaitGroup
	closed   atomic.Bool
	// closeMu orders track's Add against Close's Wait (a WaitGroup must not
	// be added to while a Wait that saw zero is returning).
	closeMu sync.RWMutex
}

// track counts one more operation in flight, so that Close waits for it, and
// returns the function to call when it ends. Once Close has begun it counts
// nothing: Close no longer waits, and the operation's node calls fail fast
// on the closed connections (or run on the caller's own clients).
func (c *Client) track() (done func()) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed.Load() {
		return func() {}
	}
	c.inflight.Add(1)
	return c.inflight.Done
}

// New returns a Client over the given go-redis clients, one per independent
// node (a *redis.Client, a sentinel failover client, or a *redis.ClusterClient
// for a cluster that counts as one node). The clients stay the caller's: Close
// does not close them.
//
// Settings that matter on those clients: MaxRetries should be -1 (a re-sent
// SET NX makes ownership ambiguous; Redlock retries whole attempts instead),
// and ContextTimeoutEnabled should be true so that a slow node's connection is
// given up at the per-node timeout rather than at ReadTimeout (the vote never
// waits for it either way). Other values are logged as a warning.
//
// It returns ErrInvalidArgument for zero clients, a nil client, the same
// client or address twice, or a bad option.
func New(clients []redis.UniversalClient, opts ...Option) (*Client, error) {
	nodes := make([]*node, 0, len(clients))
	for i, rc := range clients {
		if isNil(rc) {
			return nil, fmt.Errorf("%w: client %d is nil", ErrInvalidArgument, i)
		}
		nodes = append(nodes, &node{name: clientName(rc, i), client: rc})
	}
	c, err := newClient(nodes, opts)
	if err != nil {
		return nil, err
	}
	for _, rc := range clients {
		warnSettings(c.cfg.logger, rc)
	}
	return c, nil
}

// Dial returns a Client over nodes it connects to itself, one URL per node:
// "redis://host:port", "rediss://host:port" for TLS,
// "redis://user:password@host:port/db" for ACL users (see redis.ParseURL),
// or plain "host:port", which means "redis://host:port".
// Its connections never re-send a command, honour the per-node timeout, and
// make one quick dial attempt; Close closes them. Dial does not contact the
// nodes, so it cannot tell one server named twice by different host names
// (127.0.0.1 and localhost): only the same address spelled the same way.
//
// It returns ErrInvalidArgument for zero URLs, a malformed URL, a port
// outside 1..65535, the same address twice, or a bad option.
func Dial(urls []string, opts ...Option) (*Client, error) {
	nodes := make([]*node, len(urls))
	parsed := make([]*redis.Options, len(urls))
	for i, u := range urls {
		if !strings.Contains(u, "://") && u != "" {
			u = "redis://" + u // host:port
		}
		o, err := parseNodeURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: node %d: %v", ErrInvalidArgument, i, redactErr(err, u))
		}
		tuneOptions(o)
		parsed[i] = o
		nodes[i] = &node{name: fmt.Sprintf("%s/%d", o.Addr, o.DB)}
	}
	// Validate everything before dialing, so bad input leaves nothing open.
	c, err := newClient(nodes, opts)
	if err != nil {
		return nil, err
	}
	for i, n := range c.nodes {
		rc := redis.NewClient(parsed[i])
		n.client, n.closer = rc, rc.Close
	}
	return c, nil
}

// parseNodeURL parses one node URL of Dial (see redis.ParseURL) and checks
// that a TCP port is in 1..65535.
func parseNodeURL(u string) (*redis.Options, error) {
	if u == "" {
		return nil, errors.New("empty URL")
	}
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	if o.Network == "tcp" {
		_, port, err := net.SplitHostPort(o.Addr)
		if err != nil {
			return nil, err
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("port %q out of range 1..65535", port)
		}
	}
	return o, nil
}

// tuneOptions applies the settings Redlock needs to a node we dial.
func tuneOptions(o *redis.Options) {
	o.MaxRetries = -1              // never re-send a command
	o.ContextTimeoutEnabled = true // per-node timeouts end the call
	o.DialerRetries = 1            // one dial attempt: a dead node fails at once
	o.DisableIdentity = true       // no CLIENT SETINFO round trip on connect
	o.Protocol = 2
	if o.DialTimeout == 0 {
		o.DialTimeout = time.Second
	}
}

// NewNodeClient returns a go-redis client for one node at addr ("host:port")
// with the settings Redlock needs (see Dial). Use it with New when you need
// your own dialer or TLS configuration; extra may adjust the options before
// the client is made (it may be nil).
func NewNodeClient(addr string, extra func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr}
	tuneOptions(o)
	if extra != nil {
		extra(o)
	}
	return redis.NewClient(o)
}

func newClient(nodes []*node, opts []Option) (*Client, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("%w: no nodes", ErrInvalidArgument)
	}
	seen := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if j, dup := seen[n.name]; dup {
			return nil, fmt.Errorf("%w: node %d (%s) is the same node as node %d", ErrInvalidArgument, i, n.name, j)
		}
		seen[n.name] = i
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.checkRetention(0); err != nil {
		return nil, err
	}
	quorum := cfg.mutant.Quorum(len(nodes), len(nodes)/2+1) // chaos mutant hook
	return &Client{nodes: nodes, quorum: quorum, cfg: cfg}, nil
}

// isNil reports whether v is nil or holds a nil function or pointer: a typed
// nil such as ObserverFunc(nil) or (*redis.Client)(nil), stored in an
// interface that is not nil, whose methods would panic when called.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Func, reflect.Pointer:
		return rv.IsNil()
	}
	return false
}

// clientName names a user's client for logs, errors and duplicate checks.
func clientName(rc redis.UniversalClient, i int) string {
	switch c := rc.(type) {
	case *redis.Client:
		o := c.Options()
		return fmt.Sprintf("%s/%d", o.Addr, o.DB)
	case *redis.ClusterClient:
		return "cluster(" + strings.Join(c.Options().Addrs, ",") + ")"
	case *redis.Ring:
		return fmt.Sprintf("ring-%p", c)
	}
	return fmt.Sprintf("node-%d-%p", i, rc)
}

func warnSettings(l *slog.Logger, rc redis.UniversalClient) {
	c, ok := rc.(*redis.Client)
	if !ok {
		return
	}
	o := c.Options()
	if o.MaxRetries > 0 { // Options() reports -1 (no retries) as 0
		l.Warn("redlock: node client re-sends failed commands; set MaxRetries: -1", "node", o.Addr, "max_retries", o.MaxRetries)
	}
	if !o.ContextTimeoutEnabled {
		l.Warn("redlock: node client ignores context deadlines; set ContextTimeoutEnabled: true", "node", o.Addr)
	}
}

// redactErr drops the URL's password from a parse error.
func redactErr(err error, url string) error {
	msg := err.Error()
	if at := strings.LastIndex(url, "@"); at >= 0 {
		if s := strings.Index(url, "://"); s >= 0 && s+3 < at {
			msg = strings.ReplaceAll(msg, url[s+3:at], "REDACTED")
		}
	}
	return errors.New(msg)
}

// Nodes returns the node names in order (addresses, never passwords).
func (c *Client) Nodes() []string {
	names := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		names[i] = n.name
	}
	return names
}

// Quorum returns the number of nodes that must agree: N/2 + 1.
func (c *Client) Quorum() int { return c.quorum }

// Close waits for node calls still in flight (each bounded by the per-node
// timeout) and closes the connections that Dial opened. Clients passed to New
// are left open. Later calls return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	c.closeMu.Lock()
	already := c.closed.Swap(true)
	c.closeMu.Unlock()
	if already {
		return nil
	}
	c.inflight.Wait()
	var errs []error
	for _, n := range c.nodes {
		if n.closer != nil {
			errs = append(errs, n.closer())
		}
	}
	return errors.Join(errs...)
}

// Lock is an acquired lock: an immutable handle, safe to share between
// goroutines. Extend returns a new Lock; the old one keeps its old deadline.
// The handles of one lock (the ones Extend returns, a Lease's, nested ones)
// share whether the lock was released or lost, which Validity reports.
type Lock struct {
	client     *Client
	cfg        config
	key        string // as the caller named it
	keys       []string
	owner      string
	token      uint64
	ttl        time.Duration
	acquiredAt time.Time
	validUntil time.Time
	attempts   int
	nodes      []NodeResult
	nested     bool // a reentrant handle: Release leaves the nodes alone (reentrant.go)
	// vouch: with the amnesia guard on, not every node granted in time with
	// a trusted epoch, so vouching writes may still be on their way: Release
	// repeats them where it deletes our key, in case it overtakes one.
	vouch bool
	// released is set before Release sends its deletes, and shared by the
	// handles Extend derives: a node whose grant arrives after that (a
	// straggler of the acquisition) is released by the late-reply path.
	released *atomic.Bool
	// state is shared by every handle of this lock: those Extend derives,
	// the copies KeepAlive makes, and nested (reentrant) handles.
	state *lockState
}

// lockState is what every handle of one acquired lock shares.
type lockState struct {
	// ended is set once the lock must no longer be trusted, whatever its
	// deadline says: Release was called, or the Lease keeping it declared
	// it lost. Validity reads it.
	ended atomic.Bool

	mu    sync.Mutex
	lease *Lease        // the Lease keeping the lock alive; nil if none
	calls int           // batches of node calls still running (track)
	idle  chan struct{} // closed when calls drops to zero; nil while it is zero
}

// track counts a batch of node calls that outlived the operation that
// started them (the stragglers of the acquisition, of an extension), until
// wait returns. Release waits for them (waitCalls), so that a lock's node
// calls have all ended when its Release returns. Each batch is bounded by the
// per-node timeout.
func (s *lockState) track(wait func()) {
	s.mu.Lock()
	if s.calls == 0 {
		s.idle = make(chan struct{})
	}
	s.calls++
	s.mu.Unlock()
	go func() {
		wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.calls--; s.calls == 0 {
			close(s.idle)
			s.idle = nil
		}
	}()
}

// waitCalls blocks until every batch handed to track has ended.
func (s *lockState) waitCalls() {
	s.mu.Lock()
	idle := s.idle
	s.mu.Unlock()
	if idle != nil {
		<-idle
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
// when the lock is released or lost before it: Validity says so.
func (l *Lock) ValidUntil() time.Time { return l.validUntil }

// Validity returns the validity time left: zero or negative once the lock
// must no longer be trusted. That is when the deadline (ValidUntil) has
// passed, and also, on every handle of the lock (those Extend returned, the
// Lease's, nested ones), as soon as Release was called on any of them (a
// nested handle's Release aside: the outermost holder releases) or a Lease
// keeping the lock declared it lost (ErrLockLost). It reads the monotonic
// clock.
func (l *Lock) Validity() time.Duration {
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

// Acquire takes the lock on key for ttl, retrying after a random delay while
// the key is held elsewhere, until it succeeds, the retry policy gives up, or
// ctx ends. One attempt, as in the Redlock spec ("Distributed Locks with
// Redis" at redis.io):
//
//  1. read the monotonic clock;
//  2. send the acquire script to all N nodes at once, each with the per-node
//     timeout;
//  3. stop as soon as N/2+1 granted, or as soon as that became impossible;
//  4. with fencing on, the token is the highest counter the granting nodes
//     returned; only if fewer than a majority returned it, write it back;
//  5. validity = ttl − elapsed − (ttl × driftFactor + 2 ms), success only if
//     positive;
//  6. on failure, delete the attempt's key on all N nodes (also those that
//     seemed to refuse: a lost reply can hide a granted SET).
//
// When it fails it returns a *QuorumError wrapping ErrNotAcquired (and ctx's
// error if ctx ended), with every node's outcome in the last attempt; when it
// returns, no key of its attempts is left on a node that answered in time,
// and nodes that answered late are cleaned up before it returns. Bad
// arguments give ErrInvalidArgument; a closed client ErrClosed (also when
// Close is called between attempts: then after the node calls of the earlier
// attempts have ended). On success, the node calls that the vote did not
// wait for may still run; the Lock's Release waits for them. opts override
// the client's options for this call; Acquire does not modify the slice.
//
// Acquire is reentrant through ctx: when ctx is, or derives from, the context
// of a Lease of this Client on the same key (Lease.Context, or the context Do
// passes to its function), Acquire returns at once, without a round trip, a
// nested handle on that lock (Attempts 0; ttl and retry options are ignored).
// Releasing a nested handle does not touch the nodes: the lock is released
// only when the outermost holder releases it. Extending one extends the shared
// lock. If that Lease's context has ended, Acquire returns ErrNotAcquired
// wrapping its cause. Any other context, or another Client, contends as usual.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	cfg := c.cfg
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil option", ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if l, ok, err := c.reentrant(ctx, key, cfg); ok {
		return l, err
	}
	ctx, end := cfg.startCall(ctx, OpAcquire, key)
	l, err := c.acquire(ctx, key, ttl, cfg)
	end(l, err)
	return l, err
}

// TryAcquire is Acquire with a single attempt: it returns ErrNotAcquired at
// once when the lock is held elsewhere.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	// A new slice: appending to opts could write into the caller's array.
	return c.Acquire(ctx, key, ttl, slices.Concat(opts, []Option{WithRetry(NoRetry())})...)
}

func (c *Client) releaseOp(ctx context.Context, n *node, keys []string, owner string) reply {
	code, err := releaseScript.Run(ctx, n.client, keys[:1], owner).Int64()
	return reply{code: code, err: err}
}

func (c *Client) releaseNode(ctx context.Context, n *node, keys []string, owner string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c.releaseOp(ctx, n, keys, owner)
}

// Release deletes the lock key on every node where it still holds this
// lock's owner value, waiting for each node at most the per-node timeout. It
// runs even if ctx is already canceled (a half-done release would leave keys
// until their TTL); ctx's values are passed on.
//
// It returns, looking only at the nodes that answered (deleted, "not held" or
// "taken"; an unreachable, timed-out or failing node did not):
//
//   - a *QuorumError wrapping ErrNotHeld when a majority (N/2+1) answered
//     that the key was not ours any more (expired, or held by another
//     owner), whatever the other nodes answered: the lock had expired or
//     been taken before this call, so the holder overran it. Keys of ours
//     still found on other nodes are deleted all the same (Granted counts
//     them);
//   - a *QuorumError wrapping ErrNoQuorum when fewer than a majority
//     answered: the outcome is unknown, and the keys not deleted expire at
//     their TTL;
//   - nil otherwise: a majority answered, and it is no longer ours on any
//     of them (deleted now, or gone before), so another client can acquire it.
//
// After the Client is closed it returns ErrClosed and leaves the keys to
// expire.
//
// Once Release is called the lock's Validity is zero or negative on every
// handle, whatever the result. A Lease that keeps this lock alive is stopped
// first. Release returns after every node call the lock started has ended:
// those of the acquisition and of extensions that the vote did not wait for
// (each bounded by the per-node timeout). A nested (reentrant) handle's
// Release returns nil without a round trip.
func (l *Lock) Release(ctx context.Context) error {
	if l.nested {
		return nil // the outermost holder releases (reentrant.go)
	}
	l.state.ended.Store(true)
	l.state.stopLease() // a released lock must not be extended
	ctx, end := l.cfg.startCall(ctx, OpRelease, l.key)
	start := time.Now()
	t, err := l.release(ctx)
	l.observeOp(ctx, OpRelease, start, l.ttl, t, nil, err)
	// Node calls of this lock that were still running (stragglers of the
	// acquisition and extensions, late grants being undone) end before
	// Release returns: nothing the lock started outlives it.
	l.state.waitCalls()
	end(nil, err)
	return err
}

func (l *Lock) release(ctx context.Context) (*tally, error) {
	c := l.client
	if c.closed.Load() {
		return nil, ErrClosed
	}
	if l.released != nil {
		l.released.Store(true)
	}
	t, wait := c.vote(context.WithoutCancel(ctx), l.cfg.timeoutFor(l.ttl), len(c.nodes), true, func(ctx context.Context, n *node) reply {
		if l.vouch {
			code, err := releaseVouchScript.Run(ctx, n.client, l.keys, l.owner, strconv.FormatUint(l.token, 10)).Int64()
			return reply{code: code, err: err}
		}
		return c.releaseOp(ctx, n, l.keys, l.owner)
	}, nil)
	wait()
	deleted, notOurs := t.granted, 0
	for _, r := range t.results {
		if r.Outcome == OutcomeNotHeld || r.Outcome == OutcomeTaken {
			notOurs++
		}
	}
	qe := &QuorumError{Op: "release", Key: l.key, Quorum: c.quorum, Granted: deleted, Nodes: t.results}
	switch {
	case notOurs >= c.quorum:
		// A majority no longer held our key: the lock had expired (or was
		// taken) before this release, whatever the other nodes say. The
		// holder must learn that it overran its lock.
		qe.Err = ErrNotHeld
	case deleted+notOurs < c.quorum:
		qe.Err = ErrNoQuorum
	default:
		return t, nil
	}
	return t, qe
}

// Extend makes the lock live at least ttl more on every node that still
// holds it and returns a new Lock whose validity is ttl − elapsed − drift
// from the start of the extension. It succeeds only if a majority applied it,
// and never revives a lock whose validity has run out: then it returns
// ErrNotHeld without a round trip. The fencing token is kept.
//
// Extend never shortens a key's remaining TTL on a node: a ttl shorter than
// what is left there leaves the key as it is, and the new Lock's validity is
// then a lower bound. So no Extend — failed, successful, or applied on a node
// after it returned — can end the lock before the deadline of a handle it
// was called on (the receiver, and every handle before it, keep their
// deadlines).
//
// When a majority applied the extension in time, nodes that had answered
// that the key is gone (restarted empty, or expired it early) get it back, set
// only if absent with the time left, and, with the amnesia guard on, vouched
// for by this holder: a lock kept alive survives rolling restarts of nodes
// without persistence. It is never put where another owner holds the key,
// nor when the majority is gone. That costs one more round trip, only then.
//
// Errors: ErrInvalidArgument for a bad ttl (also one longer than the
// retention, see WithRetention); a *QuorumError wrapping ErrNotHeld when the
// lock is no longer held (expired here, or a majority of nodes say the key is
// gone or someone else's), or ErrNoQuorum when too few nodes answered (the
// receiver stays valid until its own deadline). The context's error is
// wrapped too when ctx ended.
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) (*Lock, error) {
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
	if err := checkTTL(ttl, l.cfg.driftFactor, timeout); err != nil {
		return nil, nil, err
	}
	if err := l.cfg.checkRetention(ttl); err != nil {
		return nil, nil, err
	}
	qe := &QuorumError{Op: OpExtend, Key: l.key, Quorum: c.quorum, Err: ErrNotHeld}
	if c.closed.Load() {
		return nil, nil, ErrClosed
	}
	start := time.Now()
	if !start.Before(l.validUntil) {
		qe.Cause = fmt.Errorf("validity ran out %v ago", start.Sub(l.validUntil).Round(time.Millisecond))
		return nil, nil, qe
	}
	ttlMs, retMs := strconv.FormatInt(ttl.Milliseconds(), 10), retentionMs(l.cfg)
	t, wait := c.vote(ctx, timeout, c.quorum, false, func(ctx context.Context, n *node) reply {
		code, err := extendScript.Run(ctx, n.client, l.keys, l.owner, ttlMs, retMs).Int64()
		return reply{code: code, err: err}
	}, nil)
	l.state.track(wait) // stragglers: Release waits for them
	now := time.Now()
	qe.Granted, qe.Nodes, qe.Cause = t.granted, t.results, callerEnded(ctx)
	if t.granted < c.quorum {
		refused := 0
		for _, r := range t.results {
			if r.Outcome == OutcomeNotHeld || r.Outcome == OutcomeTaken {
				refused++
			}
		}
		if refused <= len(c.nodes)-c.quorum {
			qe.Err = ErrNoQuorum
		}
		return nil, t, qe
	}
	if Validity(ttl, now.Sub(start), l.cfg.driftFactor) <= 0 {
		qe.Cause = fmt.Errorf("validity time ran out: extension took %v of the %v ttl", now.Sub(start), ttl)
		return nil, t, qe
	}
	l.reput(ctx, t, start, ttl, timeout)
	next := *l
	next.ttl, next.acquiredAt, next.nodes = ttl, now, t.results
	next.validUntil = start.Add(ttl - Drift(ttl, l.cfg.driftFactor))
	return &next, t, nil
}

// reput puts the key back, set only if absent, on the nodes that answered
// "not held" to an extension a majority applied, with the time left of the
// extension's ttl; with fencing on the node's counter is raised to the token
// and with the guard on its epoch is vouched for (this holder validly holds
// the lock, so whatever the node forgot has no other valid holder). The
// nodes put back are reported as granted in t.
func (l *Lock) reput(ctx context.Context, t *tally, start time.Time, ttl, timeout time.Duration) {
	c := l.client
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
	put, wait := c.vote(ctx, timeout, len(c.nodes), true, func(ctx context.Context, n *node) reply {
		if !gone[n] {
			return reply{code: codeNotHeld}
		}
		code, err := reputScript.Run(ctx, n.client, l.keys, args...).Int64()
		return reply{code: code, err: err}
	}, nil)
	wait()
	for i, r := range put.results {
		if gone[c.nodes[i]] && r.Outcome == OutcomeGranted {
			t.results[i].Outcome = OutcomeGranted
			t.granted++
		}
	}
}

// fenceKey names the fencing counter of lock key name: "{name}:fence", or
// "name:fence" when name already has a hash tag (see slotKey).
func fenceKey(name string) string { return slotKey(name, ":fence") }

// epochKey names the amnesia guard's epoch of lock key name (a hash with
// `born` and `trusted`): "{name}:epoch", or "name:epoch" (see slotKey).
func epochKey(name string) string { return slotKey(name, ":epoch") }

// slotKey appends suffix to name so that the result shares name's Redis
// Cluster hash slot: the slot of a key without a hash tag is that of the
// whole key, so it becomes the tag ("{name}suffix"); a key that has a tag
// keeps it ("namesuffix"). checkKeyName rejects the names for which neither
// works.
func slotKey(name, suffix string) string {
	if hasHashTag(name) {
		return name + suffix
	}
	return "{" + name + "}" + suffix
}

// hasHashTag reports whether name has a Redis Cluster hash tag: a "{"
// followed, later, by a "}" with at least one byte between them.
func hasHashTag(name string) bool {
	open := strings.IndexByte(name, '{')
	return open >= 0 && strings.IndexByte(name[open+1:], '}') > 0
}

// checkKeyName rejects a lock key (prefix included) whose fencing counter
// and epoch could not share its Redis Cluster slot: one with a brace but no
// valid hash tag, such as "a}b" or "a{}b".
func checkKeyName(name string) error {
	if !hasHashTag(name) && strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: key %q has a brace but no hash tag (\"{tag}\"): its fencing counter could not share its cluster slot", ErrInvalidArgument, name)
	}
	return nil
}
