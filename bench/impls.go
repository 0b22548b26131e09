package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	rsredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
)

// The settings every library gets (see docs/benchmarks.md, "Libraries and
// settings").
const (
	// TTL of every lock, for every library.
	TTL = 10 * time.Second
	// NodeTimeout is how long one node may take to answer one operation.
	// It is this module's default for a 10 s TTL (1 % of the TTL); the
	// tuned redsync gets the same through WithTimeoutFactor(0.01) and an
	// unlock deadline, and the floor through a context deadline.
	NodeTimeout = 100 * time.Millisecond
	// LongestTTL is the longest TTL a Client of ours uses on the bench's
	// nodes in the cases that time acquisitions: TTL in every Impl and
	// Waiter, 10 s in the multi-key and read/write lock cases, 15 s in
	// case 8 (the burst's control). Every such Client states it with
	// WithQuarantine, as docs/amnesia.md asks a production cluster to
	// ("state the cluster's longest TTL there"): the amnesia guard then
	// counts a verified node's grant of a fresh name at once once the node
	// has been up and marked for LongestTTL (old), and the harness makes
	// every node old before it times anything (bench_test.go, ageNodes).
	// The one longer lock, the memory case's holder (a minute, one key, no
	// acquisition timed), makes its own Client's bound a minute: the
	// library takes the longest TTL a Client used.
	LongestTTL = 15 * time.Second
)

// Impl is one library, configured, over one set of nodes. Op acquires key
// (one attempt, no retry) and releases it, and returns how long each step
// took; err is non-nil when either step failed.
type Impl interface {
	Op(ctx context.Context, key string) (acquire, release time.Duration, err error)
	Close()
}

// Kind names a library and its configuration.
type Kind string

// The library configurations the benchmarks compare.
const (
	// Ours is redlock.Dial with its defaults (fencing and the amnesia
	// guard on), WithNodeTimeout(NodeTimeout), which is also the default
	// at this TTL, and WithQuarantine(LongestTTL), the cluster's longest
	// TTL stated as the guard asks.
	Ours Kind = "ours"
	// OursNoFence is Ours with WithFencing(false): the same work as
	// redsync and the floor (no fencing write-back).
	OursNoFence Kind = "ours-nofence"
	// OursNoGuard is Ours with WithoutAmnesiaGuard(): what the amnesia
	// guard, on by default, costs (case 1).
	OursNoGuard Kind = "ours-noguard"
	// RedsyncDefault is redsync over go-redis clients made with
	// redis.Options{Addr} only (go-redis defaults: 3 retries, 5 dial
	// attempts 100 ms apart, 5 s read timeout, context deadlines ignored)
	// and redsync's defaults except the TTL (WithExpiry(TTL)).
	RedsyncDefault Kind = "redsync-default"
	// RedsyncTuned is redsync over the same go-redis clients as Ours
	// (redlock.NewNodeClient: no command retries, one dial attempt,
	// context deadlines honoured, RESP2, no CLIENT SETINFO), with
	// WithFailFast(true) (Lock and Unlock return once a majority answered)
	// and WithTimeoutFactor so its per-node deadline is NodeTimeout. Unlock
	// gets the caller's context: a deadline canceled when UnlockContext
	// returns at the majority would also abort the deletes still in flight.
	// Even so, fail-fast leaves some keys behind (docs/performance.md).
	RedsyncTuned Kind = "redsync-tuned"
	// Floor is plain go-redis over the same clients as Ours: SET key 1
	// EX 10 NX on every node at once, done at a majority; then DEL on every
	// node once that node's SET has answered, waiting for all (NodeTimeout
	// deadline per phase). No owner value, no script, no fencing.
	Floor Kind = "floor"
	// Redislock is bsm/redislock on node 0 only (single-node reference),
	// over a client made by redlock.NewNodeClient.
	Redislock Kind = "redislock-1node"
	// Limit is no lock at all: two phases of PING sent to every node at
	// once, each done when a majority answered (the others are left to
	// answer in the background), over the same clients as Ours. Its
	// latency is the physical limit of a majority lock's acquire +
	// release on the nodes' round trips: one round trip per phase to the
	// quorum-th fastest node, with the smallest command.
	Limit Kind = "limit"
	// OursSemaphore is Ours taking one permit of a semaphore of
	// SemaphorePermits permits (Client.Semaphore, TryAcquire) named by the
	// key, instead of the lock on the key.
	OursSemaphore Kind = "ours-semaphore"
)

// SemaphorePermits is the number of permits of OursSemaphore's semaphores.
const SemaphorePermits = 3

// NewImpl configures kind over the nodes at addrs ("host:port").
func NewImpl(kind Kind, addrs []string) (Impl, error) {
	switch kind {
	case Ours, OursNoFence, OursNoGuard, OursSemaphore:
		urls := make([]string, len(addrs))
		for i, a := range addrs {
			urls[i] = "redis://" + a
		}
		opts := []redlock.Option{redlock.WithNodeTimeout(NodeTimeout), redlock.WithQuarantine(LongestTTL)}
		switch kind {
		case OursNoFence:
			opts = append(opts, redlock.WithFencing(false))
		case OursNoGuard:
			opts = append(opts, redlock.WithoutAmnesiaGuard())
		}
		c, err := redlock.Dial(urls, opts...)
		if err != nil {
			return nil, err
		}
		if kind == OursSemaphore {
			return &semaphoreImpl{c: c}, nil
		}
		return &oursImpl{c: c, guard: kind != OursNoGuard}, nil
	case RedsyncDefault, RedsyncTuned:
		r := &redsyncImpl{opts: redsyncOptions(kind)}
		pools := make([]rsredis.Pool, len(addrs))
		for i, a := range addrs {
			c := nodeClient(kind, a)
			r.clients = append(r.clients, c)
			pools[i] = goredis.NewPool(c)
		}
		r.rs = redsync.New(pools...)
		return r, nil
	case Floor:
		f := &floorImpl{quorum: len(addrs)/2 + 1}
		for _, a := range addrs {
			f.clients = append(f.clients, nodeClient(kind, a))
		}
		return f, nil
	case Redislock:
		c := nodeClient(kind, addrs[0])
		return &redislockImpl{rdb: c, c: redislock.New(c)}, nil
	case Limit:
		l := &limitImpl{quorum: len(addrs)/2 + 1}
		for _, a := range addrs {
			l.clients = append(l.clients, nodeClient(kind, a))
		}
		return l, nil
	}
	return nil, fmt.Errorf("unknown kind %q", kind)
}

// nodeClient returns the go-redis client a library gets for one node.
func nodeClient(kind Kind, addr string) *redis.Client {
	if kind == RedsyncDefault {
		return redis.NewClient(&redis.Options{Addr: addr})
	}
	return redlock.NewNodeClient(addr, nil)
}

// redsyncOptions are the per-mutex options of a redsync configuration.
func redsyncOptions(kind Kind) []redsync.Option {
	opts := []redsync.Option{redsync.WithExpiry(TTL)}
	if kind == RedsyncTuned {
		opts = append(opts,
			redsync.WithFailFast(true),
			redsync.WithTimeoutFactor(float64(NodeTimeout)/float64(TTL)))
	}
	return opts
}

// --- ours ---

type oursImpl struct {
	c     *redlock.Client
	guard bool // the amnesia guard is on
}

type semaphoreImpl struct{ c *redlock.Client }

// IncarnationsRead reports whether im is a Client of ours with the amnesia
// guard on that has read every node's incarnation (NodeHealth.Incarnation
// set: its first check of the node has ended; until then the per-key rule
// decides the node's fresh grants). Other Impls report true.
func IncarnationsRead(im Impl) bool {
	var c *redlock.Client
	switch im := im.(type) {
	case *oursImpl:
		if !im.guard {
			return true
		}
		c = im.c
	case *semaphoreImpl:
		c = im.c
	default:
		return true
	}
	for _, n := range c.Health() {
		if n.Incarnation == "" {
			return false
		}
	}
	return true
}

func (o *semaphoreImpl) Op(ctx context.Context, key string) (time.Duration, time.Duration, error) {
	start := time.Now()
	sem, err := o.c.Semaphore(key, SemaphorePermits)
	if err != nil {
		return 0, 0, err
	}
	p, err := sem.TryAcquire(ctx, TTL)
	acq := time.Now()
	if err != nil {
		return acq.Sub(start), 0, err
	}
	err = p.Release(ctx)
	return acq.Sub(start), time.Since(acq), err
}

func (o *semaphoreImpl) Close() { _ = o.c.Close() }

func (o *oursImpl) Op(ctx context.Context, key string) (time.Duration, time.Duration, error) {
	start := time.Now()
	l, err := o.c.TryAcquire(ctx, key, TTL)
	acq := time.Now()
	if err != nil {
		return acq.Sub(start), 0, err
	}
	err = l.Release(ctx)
	return acq.Sub(start), time.Since(acq), err
}

func (o *oursImpl) Close() { _ = o.c.Close() }

// --- redsync ---

type redsyncImpl struct {
	rs      *redsync.Redsync
	clients []*redis.Client
	opts    []redsync.Option
}

func (r *redsyncImpl) Op(ctx context.Context, key string) (time.Duration, time.Duration, error) {
	start := time.Now()
	m := r.rs.NewMutex(key, r.opts...)
	err := m.TryLockContext(ctx)
	acq := time.Now()
	if err != nil {
		return acq.Sub(start), 0, err
	}
	ok, err := m.UnlockContext(ctx)
	if !ok && err == nil {
		err = errors.New("redsync: unlock not confirmed by a majority")
	}
	return acq.Sub(start), time.Since(acq), err
}

func (r *redsyncImpl) Close() {
	for _, c := range r.clients {
		_ = c.Close()
	}
}

// --- floor: plain go-redis ---

type floorImpl struct {
	clients []*redis.Client
	quorum  int
}

var errFloorNotAcquired = errors.New("floor: SET NX not granted by a majority")

func (f *floorImpl) Op(ctx context.Context, key string) (time.Duration, time.Duration, error) {
	n := len(f.clients)
	start := time.Now()
	actx, acancel := context.WithTimeout(ctx, NodeTimeout)
	defer acancel()
	var (
		rctx context.Context // set before release is closed
		wg   sync.WaitGroup
	)
	release := make(chan struct{})
	granted := make(chan bool, n)
	wg.Add(n)
	for _, c := range f.clients {
		go func() {
			defer wg.Done()
			ok, _ := c.SetNX(actx, key, "1", TTL).Result()
			granted <- ok
			// DEL only after this node's SET answered: a DEL on another
			// connection could otherwise overtake the SET and leave the key.
			<-release
			c.Del(rctx, key)
		}()
	}
	yes, answered := 0, 0
wait:
	for yes < f.quorum && yes+n-answered >= f.quorum {
		select {
		case ok := <-granted:
			answered++
			if ok {
				yes++
			}
		case <-actx.Done():
			break wait
		}
	}
	acq := time.Now()
	var rcancel context.CancelFunc
	rctx, rcancel = context.WithTimeout(ctx, NodeTimeout)
	close(release)
	wg.Wait()
	rcancel()
	if yes < f.quorum {
		return acq.Sub(start), time.Since(acq), errFloorNotAcquired
	}
	return acq.Sub(start), time.Since(acq), nil
}

func (f *floorImpl) Close() {
	for _, c := range f.clients {
		_ = c.Close()
	}
}

// --- the limit: a majority's round trip, twice ---

type limitImpl struct {
	clients []*redis.Client
	quorum  int
	wg      sync.WaitGroup // the PINGs still out, waited for by Close
}

var errLimitNoQuorum = errors.New("limit: PING not answered by a majority")

// phase sends PING to every node and returns once quorum of them answered.
func (l *limitImpl) phase(ctx context.Context) error {
	answered := make(chan error, len(l.clients))
	for _, c := range l.clients {
		l.wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, NodeTimeout)
			defer cancel()
			answered <- c.Ping(pctx).Err()
		})
	}
	ok := 0
	for range l.clients {
		if err := <-answered; err == nil {
			ok++
			if ok == l.quorum {
				return nil
			}
		}
	}
	return errLimitNoQuorum
}

func (l *limitImpl) Op(ctx context.Context, _ string) (time.Duration, time.Duration, error) {
	start := time.Now()
	err := l.phase(ctx)
	acq := time.Now()
	if err != nil {
		return acq.Sub(start), 0, err
	}
	err = l.phase(ctx)
	return acq.Sub(start), time.Since(acq), err
}

func (l *limitImpl) Close() {
	l.wg.Wait()
	for _, c := range l.clients {
		_ = c.Close()
	}
}

// --- bsm/redislock, one node ---

type redislockImpl struct {
	rdb *redis.Client
	c   *redislock.Client
}

func (r *redislockImpl) Op(ctx context.Context, key string) (time.Duration, time.Duration, error) {
	start := time.Now()
	l, err := r.c.Obtain(ctx, key, TTL, nil)
	acq := time.Now()
	if err != nil {
		return acq.Sub(start), 0, err
	}
	err = l.Release(ctx)
	return acq.Sub(start), time.Since(acq), err
}

func (r *redislockImpl) Close() { _ = r.rdb.Close() }

// --- contention: acquire with each library's own retry policy ---

// Waiter takes a lock with the library's retries (its default policy),
// waiting until it holds the key or ctx ends. attempts counts the
// acquisition attempts made, failed ones included.
type Waiter interface {
	Wait(ctx context.Context, key string) (attempts int, release func() error, err error)
	Close()
}

// NewWaiter configures kind for the contention case. Ours uses Acquire with
// DefaultRetry (full-jitter exponential backoff, 10 ms to 250 ms); redsync
// uses LockContext with its default retry delay (uniform 50-250 ms, 32
// tries per call; a call that runs out of tries is repeated until ctx ends).
func NewWaiter(kind Kind, addrs []string) (Waiter, error) {
	im, err := NewImpl(kind, addrs)
	if err != nil {
		return nil, err
	}
	switch im := im.(type) {
	case *oursImpl:
		return oursWaiter{im}, nil
	case *redsyncImpl:
		return redsyncWaiter{im}, nil
	}
	im.Close()
	return nil, fmt.Errorf("kind %q has no contention variant", kind)
}

type oursWaiter struct{ *oursImpl }

func (o oursWaiter) Wait(ctx context.Context, key string) (int, func() error, error) {
	l, err := o.c.Acquire(ctx, key, TTL)
	if err != nil {
		var qe *redlock.QuorumError
		if errors.As(err, &qe) {
			return qe.Attempts, nil, err
		}
		return 0, nil, err
	}
	return l.Attempts(), func() error { return l.Release(context.Background()) }, nil
}

type redsyncWaiter struct{ *redsyncImpl }

func (r redsyncWaiter) Wait(ctx context.Context, key string) (int, func() error, error) {
	attempts := 0
	// redsync's default delay (rand in [50 ms, 250 ms)), counted: it is
	// called once before every attempt but the first of each LockContext.
	delay := redsync.WithRetryDelayFunc(func(int) time.Duration {
		attempts++
		return time.Duration(50+rand.IntN(200)) * time.Millisecond
	})
	m := r.rs.NewMutex(key, append(r.opts[:len(r.opts):len(r.opts)], delay)...)
	for {
		attempts++
		err := m.LockContext(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return attempts, nil, err
		}
	}
	return attempts, func() error {
		ok, err := m.UnlockContext(context.Background())
		if !ok && err == nil {
			err = errors.New("redsync: unlock not confirmed by a majority")
		}
		return err
	}, nil
}
