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
// trusted; the function gets the Lease, with the fencing token and the
// validity left. Lock.KeepAlive does the extending for a lock you hold yourself.
// Both are reentrant through the context (see Reentrancy). The examples
// (ExampleClient_Do, ExampleLock_KeepAlive, ExampleClient_Acquire_reentrant)
// show each use.
//
// # Acquiring
//
// One attempt of Client.Acquire, as in the Redlock spec ("Distributed Locks
// with Redis" at redis.io):
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
// When Acquire returns, no key of its attempts is left on a node that
// answered in time. An acquire call waits for its node's reply until the key
// would have expired (the TTL from its attempt's start), whatever the vote
// and ctx: a grant whose reply comes after the vote is deleted when it comes,
// on the connection that carried it, in the background (after a success, by
// Release). The Client tracks those calls, and Client.Close waits for them
// within its bound. When Close is called between attempts, Acquire
// returns ErrClosed after the node calls of the earlier attempts have ended.
//
// Whatever the retry policy, Acquire makes no further attempt when so many
// nodes answered with an error reply that retrying cannot fix that fewer than
// a majority are left; Extend, Release, Leader and the semaphore and
// multi-key calls say the same when it is why they failed. Those replies are
// authentication (NOAUTH, WRONGPASS, and Redis 7.0's "ERR Protocol error:
// unauthenticated multibulk length" to a script call sent without the
// password), ACL (NOPERM, and Redis 7.0's "ERR The user executing the script
// ..." when a command a script runs is denied), READONLY (a replica; retried
// on a Sentinel failover client, which switches to the new master by
// itself), MOVED, ASK, CROSSSLOT (a Redis Cluster node), ERR unknown command
// (EVALSHA or EVAL renamed or disabled), ERR DB index is out of range (a
// URL's database number the node does not have), NOSCRIPT, and WRONGTYPE (another
// kind of key under the name of the lock's fencing counter or epoch; one
// under the lock's own name makes the node answer "taken", as SET NX does).
// The call fails at once with ErrMisconfigured (errors.Is) in the
// *QuorumError's Cause, which names the node and what to fix and wraps the
// node's reply (errors.As with go-redis's redis.Error). LOADING, BUSY,
// MASTERDOWN, TRYAGAIN, CLUSTERDOWN, OOM, MISCONF and NOREPLICAS are
// retried: the node ends them by itself.
//
// # Waiting
//
// Between attempts, Acquire is also told when the key is released. After its
// first failed attempt it takes a ticket (its start time) and subscribes to a
// channel of its own on every node, on one pub/sub connection per node that
// the Client opens the first time one of its calls waits (Close closes them;
// nothing is opened while nobody waits). A release, on each node where it
// deletes the key, publishes to the waiter with the lowest ticket only; once a
// majority of nodes announced the same release to it, that waiter retries at
// once instead of sleeping through its retry delay, so waiters take the key in
// the order they came (a read/write lock's waiting writers come before its
// readers, and its readers are told together: see RWMutex). A Client whose
// Release woke a waiter and that acquires
// the same key within 50 ms waits behind the waiters (as after a failed
// attempt) rather than race the woken one, and tries at once when a waiter
// of its own gives up meanwhile (it may have been the one woken): a free key
// is then taken by the first attempt. An Acquire
// whose ctx ends returns at once: it waits for the deletes of the grants that
// came back and, for 2 ms, for the replies on their way; a grant whose reply
// comes later is deleted when it arrives.
//
// The message is a hint: the lock's guarantees come from the attempt alone, a
// lost, late or forged message costs at most a retry delay or a failed
// attempt, and without pub/sub (or with a key that expires instead of being
// released) the retry policy's delays apply as before (DefaultRetry waits
// longer while the waiter is subscribed: see there).
//
// # Reentrancy
//
// Acquire is reentrant through ctx: when ctx is, or derives from, the context
// of a Lease of this Client on the same key (Lease.Context, or the context Do
// passes to its function), Acquire returns at once, without a round trip, a
// nested handle on that lock (Attempts 0; ttl and retry options are ignored).
// Releasing a nested handle does not touch the nodes: the lock is released
// only when the outermost holder releases it. Extending one extends the shared
// lock. If that Lease's context has ended, Acquire returns ErrNotAcquired
// wrapping its cause. Any other context, or another Client, contends as usual.
// Do and Lock.KeepAlive nest the same way (see each).
//
// # The amnesia guard
//
// A node that restarts without its data forgets the locks it granted, and a
// second client could then win a majority (Kleppmann, "How to do distributed
// locking", 2016). With the guard (on by default; WithQuarantine,
// WithoutAmnesiaGuard), a node that lost a key's epoch does not count for that
// key (OutcomeQuarantined) until a successful acquisition vouches for it or
// the quarantine has passed. The guard holds while at most a minority of the
// nodes lose their data within one quarantine and, counting them, at most a
// minority is emptied or unreachable at once. It also reads each node's
// incarnation (run_id and a marker key, recorded on the other nodes) when it
// connects: a node verified that way votes for a key's first use at once,
// and a node that restarted or was flushed less than the longest TTL ago
// (WithQuarantine) is quarantined as a whole (ErrQuarantined). For a node
// whose incarnation cannot be read, a key's first use waits for every
// node's answer, at most one per-node timeout. It costs one small hash per
// key and node (kept for the retention) (docs/amnesia.md). When several
// clients make a key's first use at once, the one whose grants are a
// majority asks the nodes that said "taken" again, about a round trip
// later, once the others have taken their keys back, and wins its one
// attempt, as with the guard off.
//
// # Leases
//
// Client.Do and Lock.KeepAlive keep a lock through a Lease. Extensions are
// made every interval (WithExtendInterval, default TTL/3) with the lock's TTL;
// each is owner-checked, needs a majority and never revives an expired lock
// (see Lock.Extend). A Lease's own options are HoldOptions
// (WithExtendInterval, WithMaxHold); its extensions use the lock's Options
// (those of its acquisition: WithNodeTimeout, WithLogger, WithObserver, ...).
// The Lease's context (Lease.Context, Lease.Done) is canceled, with a cause
// that Lease.Err returns (the same as context.Cause of it), as soon as:
//
//   - an extension fails (the cause wraps ErrLockLost and Extend's
//     *QuorumError);
//   - the validity deadline of the latest handle (Lock.ValidUntil, then each
//     extension's) passes before the next extension succeeded (ErrLockLost),
//     even while that extension is still in flight;
//   - the maximum hold time passes (ErrHoldLimit, see WithMaxHold);
//   - the parent context ends (its cause), or the Lease or the lock is
//     released.
//
// After that no further extension is made. Releasing the lock, or any Lock
// extended from it, directly also stops the Lease. The Lease's goroutine exits
// once its context has ended (after the extension in flight, if any, bounded
// by the per-node timeout); Lease.Release and Lock.Release wait for it.
//
// When Do returns, the extender and the hold-limit watcher have stopped. Like
// Acquire, Extend and Release, Do decides at a majority and does not wait for
// a slow or unreachable minority: node calls the votes did not wait for (the
// release's remaining deletes, the stragglers of the acquisition and
// extensions) end in the background, each bounded by the per-node timeout,
// and Client.Close waits for them. A failed release after fn returned is not
// returned by Do (fn's work is done and the keys expire at their TTL): it is
// logged at warn level and reported to the Observer.
//
// If Do's ctx already holds key through this Client (Do nested in Do, see
// Reentrancy), fn runs under the outer holder's lock, its lease reports the
// outer Lease's validity, and the outermost Do releases the lock. For a nested
// handle, KeepAlive returns a Lease that neither extends nor releases: its
// context ends with the outer holder's, or at its own hold limit
// (WithMaxHold); the outer Lease's interval stands.
//
// # Node timeouts
//
// On the nodes Dial connects to, the per-node timeout (WithNodeTimeout)
// measures the node, not this client's own queue: a node's client runs at
// most its connection pool's size (go-redis PoolSize, default 10 per CPU) of
// commands at once, and a command beyond that first waits for one of them to
// end; its timeout starts when it has its turn. The wait counts in the elapsed
// time that the validity subtracts (TTL − elapsed − drift, elapsed from the
// attempt's start, as in the Redlock spec), so it shortens the lock and never
// weakens it. It lasts at most as long as an answer could still leave the
// attempt some validity (TTL − drift − timeout − 1 ms from the attempt's
// start; for Release and Extend, one timeout), after which that node's result
// is OutcomeTimedOut with an error saying that no connection was free. For
// clients passed to New the timeout also covers the wait for one of your
// pool's connections: size PoolSize for the calls you run at once, or use
// Dial.
//
// # Leader election
//
// Client.Campaign elects one candidate per election name: being elected is
// acquiring the lock on ElectionKey(name) with the owner value
// "<identity>#<random>" (so every node shows who leads) and keeping it alive
// with Lock.KeepAlive; the Leadership's context follows that Lease. Fencing
// must be on: the term is the fencing token. Waiting candidates are woken when
// the leader resigns (see Waiting). When Campaign's ctx is, or derives from,
// the context of a Leadership of this Client for the same name, Campaign
// returns at once a nested Leadership with the same term (identity must
// match, else ErrInvalidArgument); its Resign leaves the leadership to the
// outer one.
//
// Client.Lead runs a function per term. When the leadership was lost or hit
// the hold limit (WithMaxHold: Lead resigns at once, even while the function
// runs), Lead waits for the function to return, resigns (an owner-checked
// clean-up) and campaigns again, with a new term.
//
// Client.WatchLeader does not poll the nodes in a loop: a new leader's
// Campaign and a Resign announce themselves on the election's channel, and a
// leader that crashed, or a lost message, is seen at the next periodic read.
// A change announced while the subscription was up is seen within about a
// round trip of the announcement, any other within the watch's period; a
// lower term, read from nodes that lag, is dropped. Changes that last less
// than that may be missed, and a slow reader skips intermediate leaders,
// never the current one. Reads that fewer than a majority answer send
// nothing.
//
// # Semaphores
//
// Client.Semaphore gives at most N holders of a name: N slots, each the lock
// on PermitKey(name, i), and a permit is the lock on one of them, taken with
// Acquire's rules (one attempt per slot and round, from a random slot).
// Two holders at once of one slot would be two holders of one lock, so at
// most N hold at once; a permit's fencing token is its slot's
// (docs/semaphore.md).
//
// # Releasing
//
// Lock.Release returns within one per-node timeout from its start, whatever
// this client's queues hold. On the nodes Dial connects to, a delete may
// first wait for a free connection (see Node timeouts), or for the
// acquisition's call it must not overtake; it goes on waiting in the
// background until the lock's keys would be gone on their own (twice the
// longest TTL the lock used, plus two per-node timeouts, from now: a late
// grant may set a key up to a TTL after its attempt began), and then has a
// per-node timeout from its turn. Release judges only the nodes that
// answered (deleted, "not held" or "taken"); an unreachable, timed-out or
// failing node did not. When it returns before a node answered, the
// *QuorumError's Nodes show that node as OutcomePending (its delete still
// queued, waiting for the acquisition's call, or on the nodes Dial connects
// to, sent after its turn and still within its own timeout), and Granted
// counts the deletes done by then; a Release whose deletes all still queue
// returns an error wrapping ErrNoQuorum whose message says they go on in the
// background.
//
// The deletes still running when Release returns, and the node calls of the
// acquisition and of extensions that their votes did not wait for, end in the
// background: a delete within the per-node timeout of its turn, an
// extension within the per-node timeout, an
// acquire call when its reply comes (at most the TTL after its attempt
// began); the Client tracks them, and Client.Close waits for them within its
// bound. A node's delete is sent only once that node's own acquire
// call has returned, never beside it: go-redis's connection pool may run two
// commands to one node in either order, and a delete that overtook its SET
// would leave the key until its TTL. So once Release and then Close have
// returned, no key of this lock is left on a node that answered in time (nor
// on one whose late reply came within Close's bound).
//
// # Extending
//
// Lock.Extend never shortens a key's remaining TTL on a node: a ttl shorter
// than what is left there leaves the key as it is, and the new Lock's
// validity is then a lower bound. So no Extend (failed, successful, or
// applied on a node after it returned) can end the lock before the deadline
// of a handle it was called on. When a majority applied the extension in
// time, nodes that had answered that the key is gone (restarted empty, or
// expired it early) get it back, set only if absent with the time left and,
// with the amnesia guard on, vouched for by this holder: a lock kept alive
// survives rolling restarts of nodes without persistence. It is never put
// where another owner holds the key, nor when the majority is gone; that
// costs one more round trip, only then.
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
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// Client acquires locks on a fixed set of N independent Redis nodes. It is
// safe for concurrent use. Close it when done: it waits for calls still in
// flight (within a bound) and closes the connections it dialed itself.
type Client struct {
	nodes  []*node
	quorum int
	cfg    config
	// eng runs the node calls (internal/nodecall): the nodes' queues,
	// the votes' calls, and the calls in flight that Close waits for.
	eng nodecall.Engine
	// ttlArg and retentionArg box the TTL and the retention for the
	// scripts (nodecall.MillisArgs).
	ttlArg, retentionArg nodecall.MillisArgs
	notify               notifier   // wakes waiting Acquire calls on release (notify.go)
	health               healthView // what the node calls saw of each node (health.go)
	// inc is every node's incarnation (incarnation.go); nil with the
	// amnesia guard off.
	inc *incTracker
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
// The amnesia guard reads each node's incarnation on these clients too, but
// cannot see a node restart on reconnecting (Dial installs that hook on the
// clients it makes): a restart that kept the node's marker (a restore from
// an older snapshot) would go unseen. So with New a key's first use is
// always judged by the per-key rule and waits for every node's answer, up
// to the per-node timeout; with Dial it decides at the majority on nodes
// that are verified and old (docs/amnesia.md).
//
// It returns ErrInvalidArgument for zero clients, a nil client, the same
// client or address twice, or a bad option.
func New(clients []redis.UniversalClient, opts ...Option) (*Client, error) {
	nodes := make([]*node, 0, len(clients))
	for i, rc := range clients {
		if isNil(rc) {
			return nil, fmt.Errorf("%w: client %d of %d is nil", ErrInvalidArgument, i+1, len(clients))
		}
		nd := &node{Idx: i, Name: clientName(rc, i), Client: rc}
		nd.LimitBacklog(rc)
		nodes = append(nodes, nd)
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
// make one quick dial attempt; Close closes them. It runs at most a node's
// connection pool's size of commands on it at once (PoolSize, a URL parameter
// pool_size; default 10 per CPU), and a command's per-node timeout starts
// when it has its turn (see WithNodeTimeout). Dial does not contact the
// nodes, so it cannot tell one server named twice by different host names
// (127.0.0.1 and localhost): only the same address spelled the same way.
//
// It returns ErrInvalidArgument for zero URLs, a malformed URL, a port
// outside 1..65535, a negative database number or pool_size, the same
// address twice, or a bad option.
func Dial(urls []string, opts ...Option) (*Client, error) {
	return dial(urls, nil, opts)
}

// ParseNodes splits a comma-separated node list, such as a --nodes flag or
// an environment variable, into Dial's URLs: each entry is trimmed, and
// "host:port" becomes "redis://host:port". An empty list (or one of blanks)
// gives ErrInvalidArgument, as Dial does for no URLs: an unset variable must
// not look like a list. So does an empty entry ("a,,b", or a comma at either
// end), rather than a node silently left out of the quorum; the error names
// the entry by its place ("node 2 of 3", counted from 1), never the list,
// which may hold passwords. The URLs themselves are checked by Dial.
func ParseNodes(s string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("%w: no nodes (the list is empty)", ErrInvalidArgument)
	}
	parts := strings.Split(s, ",")
	urls := make([]string, len(parts))
	for i, n := range parts {
		if n = strings.TrimSpace(n); n == "" {
			return nil, fmt.Errorf("%w: %s is empty (two commas in a row, or a comma at an end)", ErrInvalidArgument, nodeOf(i, len(parts)))
		}
		urls[i] = nodeURL(n)
	}
	return urls, nil
}

// nodeURL returns u, or "redis://u" for a plain "host:port".
func nodeURL(u string) string {
	if !strings.Contains(u, "://") && u != "" {
		return "redis://" + u
	}
	return u
}

// dial is Dial; adjust, when not nil, may change node i's options before its
// client is made (tests give the nodes an in-memory dialer).
func dial(urls []string, adjust func(i int, o *redis.Options), opts []Option) (*Client, error) {
	nodes := make([]*node, len(urls))
	parsed := make([]*redis.Options, len(urls))
	for i, u := range urls {
		u = nodeURL(u)
		o, err := parseNodeURL(u)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrInvalidArgument, nodeOf(i, len(urls)), redactErr(err, u))
		}
		tuneOptions(o)
		parsed[i] = o
		nodes[i] = &node{Idx: i, Name: fmt.Sprintf("%s/%d", o.Addr, o.DB)}
	}
	// Validate everything before dialing, so bad input leaves nothing open.
	c, err := newClient(nodes, opts)
	if err != nil {
		return nil, err
	}
	if c.inc != nil {
		c.inc.watched = true // connected sees every restart
	}
	for i, n := range c.nodes {
		if adjust != nil {
			adjust(i, parsed[i])
		}
		if c.inc != nil {
			// A new connection reads the node's run_id before any command
			// is sent on it: a restart is seen at once (incarnation.go).
			prev := parsed[i].OnConnect
			parsed[i].OnConnect = func(ctx context.Context, cn *redis.Conn) error {
				if prev != nil {
					if err := prev(ctx, cn); err != nil {
						return err
					}
				}
				c.inc.connected(i, ctx, cn)
				return nil
			}
		}
		rc := redis.NewClient(parsed[i])
		n.Queue = nodecall.NewQueue(rc.Options().PoolSize, c.eng.Stopped(), ErrClosed)
		rc.AddHook(n.Queue)
		n.Client, n.Closer = rc, rc.Close
		n.LimitBacklog(rc)
	}
	c.eng.Queued = true
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
	// go-redis takes both as they are: a negative pool size panics when
	// the client is made, and a negative database fails every connection.
	if o.PoolSize < 0 {
		return nil, fmt.Errorf("pool_size %d must not be negative", o.PoolSize)
	}
	if o.DB < 0 {
		return nil, fmt.Errorf("database number %d must not be negative", o.DB)
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
// the client is made (it may be nil). A Client made by New over such clients
// does not queue its commands itself, so the per-node timeout also covers the
// wait for a free connection of the client's pool (see WithNodeTimeout).
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
		if j, dup := seen[n.Name]; dup {
			return nil, fmt.Errorf("%w: %s (%s) is the same node as node %d", ErrInvalidArgument, nodeOf(i, len(nodes)), n.Name, j+1)
		}
		seen[n.Name] = i
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if err := cfg.checkRetention(0); err != nil {
		return nil, err
	}
	quorum := cfg.mutant.Quorum(len(nodes), len(nodes)/2+1) // chaos mutant hook
	c := &Client{nodes: nodes, quorum: quorum, cfg: cfg}
	c.eng.Nodes, c.eng.Quorum = nodes, quorum
	c.health.init(nodes, cfg.logger)
	c.eng.Answered = c.health.answered
	c.eng.Init()
	c.notify.c = c
	if cfg.quarantine > 0 {
		c.inc = newIncTracker(c)
	}
	return c, nil
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
		names[i] = n.Name
	}
	return names
}

// Quorum returns the number of nodes that must agree: N/2 + 1.
func (c *Client) Quorum() int { return c.quorum }

// Close waits for the node calls still in flight, then closes the
// connections Dial opened. Those include calls that finished operations left
// in the background: a Release's deletes past the majority, acquire calls
// still waiting for their reply (a late grant is deleted when it comes),
// extensions' stragglers. It waits at most the longest per-node timeout its
// operations used, whatever the nodes do; then it stops those calls, closes
// its connections, and returns at most 10 ms later. So no key of a released
// lock or failed attempt is left on a node whose reply came within that
// bound. Clients passed to New stay open: a read in flight on one, or the
// set-up of a pub/sub connection that the node never answers, ends at its
// own deadline after Close returned; the pub/sub connections are closed. An
// Acquire waiting between attempts returns ErrClosed at once; later calls
// return ErrClosed. Close is idempotent.
func (c *Client) Close() error {
	idle, wait, first := c.eng.Close()
	if !first {
		return nil
	}
	bound := time.NewTimer(wait)
	defer bound.Stop()
	notified := c.notify.close() // waiting Acquire calls return ErrClosed now
	// Channels: testing/synctest sees the waits as durable.
	var err error
	stopped := false
	for idle != nil || notified != nil {
		select {
		case <-idle:
			idle = nil
		case <-notified:
			notified = nil
		case <-bound.C:
			if stopped { // the grace is over
				idle, notified = nil, nil
				break
			}
			stopped = true
			c.eng.StopCalls()
			err = c.closeConns() // ends the reads in flight on them
			bound.Reset(closeGrace)
		}
	}
	if !stopped {
		c.eng.StopCalls()
		err = c.closeConns()
	}
	return err
}

// closeGrace is how long Close, once it stopped the calls in flight at its
// bound, gives them to end.
const closeGrace = 10 * time.Millisecond

// closeConns closes the connections that Dial opened.
func (c *Client) closeConns() error {
	var errs []error
	for _, n := range c.nodes {
		if n.Closer != nil {
			errs = append(errs, n.Closer())
		}
	}
	return errors.Join(errs...)
}

// Acquire takes the lock on key for ttl, retrying after a random delay while
// the key is held elsewhere, until it succeeds, the retry policy gives up, ctx
// ends, or no majority of the nodes has answered for the outage limit
// (WithOutageLimit, default 30 s). opts override the client's options for this
// call; Acquire does not modify the slice. See Acquiring, Waiting and
// Reentrancy in the package doc for an attempt's steps, how a release wakes a
// waiter, and nested calls through a Lease's context.
//
// On failure it returns a *QuorumError (errors.As) with every node's outcome
// in the last attempt, wrapping ErrNotAcquired, ctx's error if ctx ended, and
// ErrTaken when the key was held elsewhere or ErrNoQuorum when too few nodes
// answered (errors.Is); no key of its attempts is left behind. Error replies
// that retrying cannot fix (a wrong password) end it at once (see Acquiring).
// Bad arguments give ErrInvalidArgument; a closed client ErrClosed (also when
// Close is called between attempts).
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...Option) (*Lock, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	cfg := c.cfg
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	return c.acquireWith(ctx, key, ttl, cfg)
}

// acquireWith is Acquire once its options were applied (Do and Campaign
// acquire through it): reentrant, observed, with cfg.
func (c *Client) acquireWith(ctx context.Context, key string, ttl time.Duration, cfg config) (*Lock, error) {
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
	if len(opts) == 0 {
		return c.Acquire(ctx, key, ttl, tryOnce...) // Acquire does not modify it
	}
	// A new slice: appending to opts could write into the caller's array.
	return c.Acquire(ctx, key, ttl, slices.Concat(opts, tryOnce)...)
}

// tryOnce is TryAcquire's option, made once.
var tryOnce = []Option{WithRetry(NoRetry())}
