package etcdcompare

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/types"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// Raft timing of the embedded members. etcd's smallest lease TTL is
// ⌈1.5 × election timeout⌉ in whole seconds, so a 600 ms election timeout
// allows the 1 s TTL the scenarios use; 100 ms heartbeats keep a loaded
// 2-core machine (race detector, other tests) from electing needlessly.
const (
	tickMs     = 100
	electionMs = 600
)

// startTimeout bounds how long StartCluster waits for every member to be
// ready (a fixed 1 s per-peer bootstrap wait, plus a first election).
const startTimeout = 30 * time.Second

// ErrInvalidArgument reports a bad argument to a function of this package.
var ErrInvalidArgument = errors.New("etcdcompare: invalid argument")

// Cluster is an embedded etcd cluster: N members (go.etcd.io/etcd/server/v3/embed)
// in this process, listening on free loopback ports, with their data in a
// temporary directory that Close removes.
//
// Faults act on members: Isolate cuts a member off from every peer in both
// directions (raft messages dropped, EtcdServer.CutPeer), Rejoin mends it, and
// Kill isolates it and then stops it for good. Client-side faults are not the
// cluster's business: each client dials a member through a proxy of its own
// (see Env), so one client's traffic can be held or dropped alone.
//
// A Cluster is safe for concurrent use.
type Cluster struct {
	dir     string
	members []*Member

	wg sync.WaitGroup // members being stopped by Kill
}

// Member is one etcd server of a Cluster.
type Member struct {
	index     int
	name      string
	clientURL url.URL
	etcd      *embed.Etcd

	mu      sync.Mutex
	stopped bool
}

// Index returns the member's position in the cluster (0-based).
func (m *Member) Index() int { return m.index }

// ClientAddr returns the member's client address, "127.0.0.1:PORT".
func (m *Member) ClientAddr() string { return m.clientURL.Host }

// ID returns the member's raft ID.
func (m *Member) ID() types.ID { return m.etcd.Server.MemberID() }

// Stopped reports whether Kill stopped the member.
func (m *Member) Stopped() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stopped
}

// freePorts returns n distinct free loopback TCP ports. They are free when
// checked; another process may take one before etcd binds it, in which case
// StartCluster fails and may be called again.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdcompare: find a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// StartCluster starts an n-member cluster (n ≥ 1) and waits until every
// member is ready to serve clients (typically 1–3 s). ctx bounds the wait.
// The members log nothing. It returns ErrInvalidArgument for n < 1, or the
// error that stopped a member from starting; on error nothing is left
// running and the data directory is removed.
func StartCluster(ctx context.Context, n int) (*Cluster, error) {
	if n < 1 {
		return nil, fmt.Errorf("%w: cluster size %d, want at least 1", ErrInvalidArgument, n)
	}
	dir, err := os.MkdirTemp("", "etcdcompare-*")
	if err != nil {
		return nil, fmt.Errorf("etcdcompare: %w", err)
	}
	c := &Cluster{dir: dir}
	ports, err := freePorts(2 * n)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	peerURL := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i])} }
	clientURL := func(i int) url.URL { return url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", ports[2*i+1])} }
	var initial []string
	for i := range n {
		u := peerURL(i)
		initial = append(initial, fmt.Sprintf("m%d=%s", i, u.String()))
	}

	// Members of a new cluster wait for each other to bootstrap: start them
	// all at once.
	type started struct {
		e   *embed.Etcd
		err error
	}
	results := make([]started, n)
	var wg sync.WaitGroup
	for i := range n {
		cfg := embed.NewConfig()
		cfg.Name = fmt.Sprintf("m%d", i)
		cfg.Dir = filepath.Join(dir, cfg.Name)
		cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
		cfg.TickMs, cfg.ElectionMs = tickMs, electionMs
		pu, cu := peerURL(i), clientURL(i)
		cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
		cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
		cfg.InitialCluster = strings.Join(initial, ",")
		cfg.InitialClusterToken = filepath.Base(dir)
		c.members = append(c.members, &Member{index: i, name: cfg.Name, clientURL: cu})
		wg.Go(func() {
			e, err := embed.StartEtcd(cfg)
			results[i] = started{e, err}
		})
	}
	wg.Wait()
	var errs []error
	for i, r := range results {
		if r.err != nil {
			errs = append(errs, fmt.Errorf("etcdcompare: start member %d: %w", i, r.err))
			continue
		}
		c.members[i].etcd = r.e
	}
	if len(errs) == 0 {
		wctx, cancel := context.WithTimeout(ctx, startTimeout)
		for i, m := range c.members {
			select {
			case <-m.etcd.Server.ReadyNotify():
			case err := <-m.etcd.Err():
				errs = append(errs, fmt.Errorf("etcdcompare: member %d failed while starting: %w", i, err))
			case <-wctx.Done():
				errs = append(errs, fmt.Errorf("etcdcompare: member %d not ready: %w", i, wctx.Err()))
			}
			if len(errs) > 0 {
				break
			}
		}
		cancel()
	}
	if len(errs) > 0 {
		c.Close()
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// Members returns the members in index order.
func (c *Cluster) Members() []*Member { return append([]*Member(nil), c.members...) }

// Member returns member i; it panics if i is out of range, like a slice.
func (c *Cluster) Member(i int) *Member { return c.members[i] }

// Size returns the number of members, stopped ones included.
func (c *Cluster) Size() int { return len(c.members) }

// Isolate cuts member i off from every other member in both directions:
// raft messages (votes, appends, heartbeats, forwarded proposals) are
// dropped until Rejoin. Its clients can still reach it, so requests through
// it that need the leader wait and time out. It returns ErrInvalidArgument
// for a bad index.
func (c *Cluster) Isolate(i int) error { return c.cut(i, true) }

// Rejoin undoes Isolate for member i. It returns ErrInvalidArgument for a bad
// index.
func (c *Cluster) Rejoin(i int) error { return c.cut(i, false) }

func (c *Cluster) cut(i int, on bool) error {
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("%w: member %d of %d", ErrInvalidArgument, i, len(c.members))
	}
	m := c.members[i]
	for _, o := range c.members {
		if o == m || o.etcd == nil {
			continue
		}
		if on {
			m.etcd.Server.CutPeer(o.ID())
			o.etcd.Server.CutPeer(m.ID())
		} else {
			m.etcd.Server.MendPeer(o.ID())
			o.etcd.Server.MendPeer(m.ID())
		}
	}
	return nil
}

// Kill stops member i as a crash would look to the others: it is isolated
// first, then stopped without handing over leadership
// (EtcdServer.HardStop), in the background; Close waits for that. A killed
// member stays down for the cluster's life (the scenarios throw the cluster
// away after each trial). It returns ErrInvalidArgument for a bad index;
// killing a member twice does nothing.
func (c *Cluster) Kill(i int) error {
	if err := c.Isolate(i); err != nil {
		return err
	}
	m := c.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil
	}
	m.stopped = true
	c.wg.Go(func() {
		m.etcd.Server.HardStop()
		m.etcd.Close()
	})
	return nil
}

// Leader returns the index of the member that a running member believes is
// the leader, or -1 if none knows one.
func (c *Cluster) Leader() int {
	for _, m := range c.members {
		if m.etcd == nil || m.Stopped() {
			continue
		}
		lead := m.etcd.Server.Leader()
		for j, o := range c.members {
			if o.etcd != nil && o.ID() == lead {
				return j
			}
		}
	}
	return -1
}

// Close stops every member still running, waits for killed members to
// finish stopping, and removes the data directory. gRPC and raft goroutines
// may need a few seconds more to drain after Close returns. Close is not
// safe to call twice.
func (c *Cluster) Close() error {
	// The cluster is thrown away: members stop without handing leadership
	// over (EtcdServer.HardStop first), in parallel. A graceful stop would
	// make a stopping leader wait for a stopping follower to take over.
	for i := range c.members {
		m := c.members[i]
		m.mu.Lock()
		if !m.stopped && m.etcd != nil {
			m.stopped = true
			c.wg.Go(func() {
				m.etcd.Server.HardStop()
				m.etcd.Close()
			})
		}
		m.mu.Unlock()
	}
	c.wg.Wait()
	return os.RemoveAll(c.dir)
}
