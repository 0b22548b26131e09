package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// Backend names the kind of server behind the nodes of a Cluster.
type Backend string

const (
	// InProcess nodes are miniredis servers inside this process, each with
	// its own clock. No set-up needed; the default.
	InProcess Backend = "inprocess"
	// RedisServer nodes are real redis-server processes started and stopped
	// by the harness.
	RedisServer Backend = "redis-server"
)

// ParseBackend returns the Backend named s: "inprocess" (or "") or
// "redis-server", case-insensitive. Any other name is an error that lists
// the valid ones.
func ParseBackend(s string) (Backend, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", string(InProcess):
		return InProcess, nil
	case string(RedisServer):
		return RedisServer, nil
	}
	return "", fmt.Errorf("chaos: unknown backend %q (want %q or %q)", s, InProcess, RedisServer)
}

// DefaultNodes is the number of nodes of a Cluster when
// ClusterOptions.Nodes is 0.
const DefaultNodes = 5

// Timeouts of the go-redis clients made by Cluster.Client.
const (
	// clientDialTimeout bounds one dial to a node (through its proxy).
	clientDialTimeout = 100 * time.Millisecond
	// clientIOTimeout is the read and write timeout of a node connection, a
	// backstop behind the lock's per-node timeout.
	clientIOTimeout = time.Second
	// clientPoolSize is the go-redis PoolSize per node and client. A client
	// opens about one connection per concurrent call, so this is only an
	// upper bound; it is large because go-redis v9 also uses PoolSize as the
	// number of failed dials (counted over the pool's life) after which it
	// stops dialing the node and fails at once for at least a second, which
	// would keep a restarted node out of reach and slow the chaos runs down.
	clientPoolSize = 1000
)

// ClusterOptions configures NewCluster. The zero value is 5 in-process
// nodes.
type ClusterOptions struct {
	// Backend is the kind of node; "" means InProcess.
	Backend Backend
	// Nodes is the number of nodes; 0 means DefaultNodes (5). It must be at
	// least 1.
	Nodes int
	// RedisBinary is the redis-server executable for the RedisServer
	// backend; "" looks it up on PATH. Ignored in-process.
	RedisBinary string
	// Persistence runs redis-server nodes with appendonly yes and appendfsync
	// always, so that Node.Restart keeps every acknowledged write. Off by
	// default: then Restart returns ErrNeedsPersistence and only
	// RestartAmnesia works. In-process nodes always keep their data across
	// Restart, whatever this says.
	Persistence bool
	// Clocks says how redis-server nodes' clocks move (see ClockMode); ""
	// is ClockAuto. Ignored in-process.
	Clocks ClockMode
	// Fenced is the storage behind the fenced resource that Run's holders
	// write to; nil means NewRegisterStore (fencing.Register, in process). The
	// cluster does not close it.
	Fenced FencedStore
}

// Cluster is N independent Redis nodes for chaos tests, each behind its own
// fault-injecting TCP Proxy, all on 127.0.0.1. Its methods are safe for
// concurrent use. Close it when done.
type Cluster struct {
	backend Backend
	nodes   []*Node
	dir     string // data directories of redis-server nodes; "" in-process
	clocks  string // how the nodes' clocks move, for Clocks
	fenced  FencedStore

	mu      sync.Mutex
	closed  bool
	clients []weak.Pointer[redlock.Client]
}

// NewCluster starts opt.Nodes nodes of opt.Backend and a proxy in front of
// each. In-process nodes listen on free loopback ports. Real nodes are
// redis-server processes on free loopback ports, each verified to be the
// process that was started (the pid answering INFO server), each with its own
// data directory in a temporary directory that Close removes. ctx bounds the
// start. On error, everything started is stopped again. It returns an error
// for bad options, a missing redis-server, or a node that does not start.
func NewCluster(ctx context.Context, opt ClusterOptions) (*Cluster, error) {
	kind, err := ParseBackend(string(opt.Backend))
	if err != nil {
		return nil, err
	}
	if opt.Nodes == 0 {
		opt.Nodes = DefaultNodes
	}
	if opt.Nodes < 1 {
		return nil, fmt.Errorf("chaos: cluster needs at least 1 node, got %d", opt.Nodes)
	}
	if err := opt.Clocks.check(); err != nil {
		return nil, err
	}
	c := &Cluster{backend: kind, clocks: inProcessClocks, fenced: opt.Fenced}
	if c.fenced == nil {
		c.fenced = NewRegisterStore()
	}
	bes := make([]backend, opt.Nodes)
	clocks := make([]*nodeClock, opt.Nodes)
	for i := range clocks {
		clocks[i] = newNodeClock()
	}
	switch kind {
	case InProcess:
		for i := range bes {
			b, err := newMemBackend(clocks[i])
			if err != nil {
				return c.abandon(bes, err)
			}
			bes[i] = b
		}
	case RedisServer:
		if err := c.startServers(ctx, opt, bes, clocks); err != nil {
			return c.abandon(bes, err)
		}
	}
	for i, be := range bes {
		if err := c.addNode(i, be, clocks[i]); err != nil {
			return c.abandon(bes, err)
		}
	}
	return c, nil
}

// startServers starts a redis-server process for each of bes, at once, each
// with its own data directory under a new temporary directory (c.dir).
func (c *Cluster) startServers(ctx context.Context, opt ClusterOptions, bes []backend, clocks []*nodeClock) error {
	bin := opt.RedisBinary
	if bin == "" {
		var err error
		if bin, err = redisserver.Available(); err != nil {
			return fmt.Errorf("chaos: redis-server backend: %w", err)
		}
	}
	dir, err := os.MkdirTemp("", "chaos-redis-*")
	if err != nil {
		return fmt.Errorf("chaos: data directory: %w", err)
	}
	c.dir = dir
	rc, err := prepareClocks(ctx, opt.Clocks, dir)
	if err != nil {
		return err
	}
	c.clocks = rc.desc
	g, gctx := errgroup.WithContext(ctx)
	for i := range bes {
		dir := filepath.Join(c.dir, fmt.Sprintf("node%d", i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("chaos: data directory: %w", err)
		}
		g.Go(func() error {
			b, err := newRealBackend(gctx, redisserver.Options{Binary: bin, Dir: dir, Persistence: opt.Persistence}, rc, dir, clocks[i], opt.Persistence)
			if err != nil {
				return fmt.Errorf("chaos: node%d: %w", i, err)
			}
			bes[i] = b
			return nil
		})
	}
	return g.Wait()
}

// addNode puts node i, served by be, behind its proxy and gives it an admin
// connection.
func (c *Cluster) addNode(i int, be backend, clock *nodeClock) error {
	admin := newAdminClient(be.addr())
	if rb, ok := be.(*realBackend); ok {
		rb.admin = admin
	}
	p, err := NewProxy(be.addr())
	if err != nil {
		_ = admin.Close()
		return err
	}
	c.nodes = append(c.nodes, &Node{
		index: i,
		name:  fmt.Sprintf("node%d", i),
		kind:  c.backend,
		proxy: p,
		be:    be,
		clock: clock,
		admin: admin,
	})
	return nil
}

// abandon stops what NewCluster started before it failed with err: the
// nodes' proxies and admin connections, the backends in bes, the data
// directory. It returns err joined with any error from stopping them.
func (c *Cluster) abandon(bes []backend, err error) (*Cluster, error) {
	errs := []error{err}
	for _, n := range c.nodes {
		errs = append(errs, n.proxy.Close(), n.admin.Close())
	}
	for _, be := range bes {
		if be != nil {
			errs = append(errs, be.close())
		}
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return nil, errors.Join(errs...)
}

// Backend returns the kind of the cluster's nodes.
func (c *Cluster) Backend() Backend { return c.backend }

// Nodes returns the nodes in order. The slice is a copy.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Node returns node i (from 0). It panics if i is out of range, like a
// slice index.
func (c *Cluster) Node(i int) *Node { return c.nodes[i] }

// Addrs returns the addresses clients dial, one per node in node order: the
// proxies' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a redlock client over every node, through the proxies. Its
// node connections are the ones redlock.Dial makes (no command retries, one
// dial attempt, context deadlines honoured, as redlock.NewNodeClient) with a
// 100 ms dial timeout, 1 s read and write timeouts and a pool of up to 1000
// connections per node (clientDialTimeout, clientIOTimeout, clientPoolSize). Closing the returned client closes
// those connections; Cluster.Close also closes every client it returned that
// is still open.
//
// go-redis behaviour worth knowing in chaos runs: every new connection
// starts with a HELLO round trip (so it is delayed or lost like any
// request), and after PoolSize failed dials to a node the pool fails
// every dial to that node with the last error until a probe, made once a
// second, succeeds; that probe goroutine can outlive Close by up to a
// second.
//
// It returns ErrClosed after Close, or the error of redlock.Dial (a bad
// option).
func (c *Cluster) Client(opts ...redlock.Option) (*redlock.Client, error) {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = fmt.Sprintf("redis://%s?dial_timeout=%s&read_timeout=%s&write_timeout=%s&pool_size=%d",
			n.Addr(), clientDialTimeout, clientIOTimeout, clientIOTimeout, clientPoolSize)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	rc, err := redlock.Dial(urls, opts...)
	if err != nil {
		return nil, err
	}
	// Weak pointers: a client closed and dropped by its user is not kept
	// alive; prune those when the list has doubled.
	if len(c.clients) >= 64 && len(c.clients) == cap(c.clients) {
		live := c.clients[:0]
		for _, w := range c.clients {
			if w.Value() != nil {
				live = append(live, w)
			}
		}
		clear(c.clients[len(live):])
		c.clients = live
	}
	c.clients = append(c.clients, weak.Make(rc))
	return rc, nil
}

// keys returns, for every node that is not killed, the keys matching pattern
// (Redis glob syntax; "" means "*"), sorted, asking each server directly
// rather than through its proxy, so network faults do not hide keys. A
// killed node has no entry; a node without matching keys has an empty one.
// It returns ErrNodePaused if a node is paused, ErrClosed after Close, or the
// error of a SCAN (each node's bounded by 2 s).
func (c *Cluster) keys(ctx context.Context, pattern string) (map[int][]string, error) {
	if pattern == "" {
		pattern = "*"
	}
	out := make(map[int][]string, len(c.nodes))
	var errs []error
	for i, n := range c.nodes {
		keys, ok, err := n.keys(ctx, pattern)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			out[i] = keys
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// ownersLeft counts the nodes (not killed, not paused) on which key holds
// one of the owner values in owners, asking each server directly.
func (c *Cluster) ownersLeft(ctx context.Context, key string, owners map[string]bool) (int, error) {
	left := 0
	for _, n := range c.nodes {
		killed, paused, err := n.state()
		if err != nil {
			return 0, err
		}
		if killed || paused {
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, adminTimeout)
		v, err := n.admin.Get(gctx, key).Result()
		cancel()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return 0, fmt.Errorf("chaos: get %s on %s: %w", key, n.name, err)
		case owners[v]:
			left++
		}
	}
	return left, nil
}

// deleteKey deletes key (only that key) on every node that is up, asking
// each server directly.
func (c *Cluster) deleteKey(ctx context.Context, key string) error {
	for _, n := range c.nodes {
		killed, paused, err := n.state()
		if err != nil {
			return err
		}
		if killed || paused {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, adminTimeout)
		err = n.admin.Del(dctx, key).Err()
		cancel()
		if err != nil {
			return fmt.Errorf("chaos: delete %s on %s: %w", key, n.name, err)
		}
	}
	return nil
}

// HealAll brings every node back to normal, in parallel: killed nodes are
// restarted (keeping their data when the backend can: in-process, or
// redis-server with Persistence; otherwise they come back empty), pauses
// end, network faults are cleared, and clocks run at rate 1 again (the
// offset from earlier jumps and rates is kept when it is ahead; a clock
// stepped back is moved forward to real time: HealAll never sets one back). It
// returns ErrClosed after Close, or the joined errors of the nodes, including
// any error a background pause or clock goroutine met since the last
// HealAll.
func (c *Cluster) HealAll(ctx context.Context) error {
	return c.eachNode(func(n *Node) error { return n.heal(ctx) })
}

// FlushAll deletes every key on every node, killed ones included (their
// data is wiped for when they restart). It returns ErrNodePaused if a node is
// paused (HealAll first), ErrClosed after Close, or the joined errors of the
// nodes.
func (c *Cluster) FlushAll(ctx context.Context) error {
	return c.eachNode(func(n *Node) error { return n.flush(ctx) })
}

func (c *Cluster) eachNode(f func(*Node) error) error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() { errs[i] = f(n) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Close stops everything the cluster started and waits for it: pauses end,
// clock goroutines stop, the proxies and every client from Client that is
// still open are closed, miniredis servers are closed and redis-server
// processes are stopped (by their pid) and reaped, and the data directories
// are removed. No goroutine of the cluster is left. Later calls do nothing
// and return nil; node methods then return ErrClosed. It returns the joined
// errors of stopping things.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	clients := c.clients
	c.clients = nil
	c.mu.Unlock()

	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.shutdown())
	}
	for _, n := range c.nodes {
		n.wg.Wait()
	}
	// Proxies first: calls still in flight fail at once, so the clients'
	// Close does not wait for them.
	for _, n := range c.nodes {
		errs = append(errs, n.proxy.Close())
	}
	for _, w := range clients {
		if rc := w.Value(); rc != nil {
			errs = append(errs, rc.Close())
		}
	}
	for _, n := range c.nodes {
		errs = append(errs, n.admin.Close(), n.be.close())
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
	}
	return errors.Join(errs...)
}
