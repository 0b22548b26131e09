package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// SoakOp is one kind of operation the clients of a soak loop over.
type SoakOp string

// The operations of a soak. Each takes the lock (or a permit, or a
// leadership) on one of the soak's keys, writes to that key's fenced
// register while it believes it holds it, and lets go.
const (
	// SoakAcquire is Client.Acquire (retrying up to 2 × TTL), a hold of
	// SoakOptions.Hold, Lock.Release.
	SoakAcquire SoakOp = "acquire"
	// SoakTry is Client.TryAcquire (one attempt), then as SoakAcquire.
	SoakTry SoakOp = "try"
	// SoakDo is Client.Do holding for TTL/2, so that the lease extends the
	// lock at least once (every TTL/3).
	SoakDo SoakOp = "do"
	// SoakSemaphore is a permit of a 2-permit Semaphore beside the key,
	// each of whose slots is judged as a lock.
	SoakSemaphore SoakOp = "semaphore"
	// SoakMulti is Client.DoMulti over the key and the next one.
	SoakMulti SoakOp = "multi"
	// SoakElect is Client.Campaign on an election beside the key, leading
	// for TTL/2, then Resign.
	SoakElect SoakOp = "elect"
)

// soakOps lists the operations in the order summaries show them.
var soakOps = []SoakOp{SoakAcquire, SoakTry, SoakDo, SoakSemaphore, SoakMulti, SoakElect}

// DefaultSoakMix is the weight of each operation when SoakOptions.Mix is
// nil: mostly plain locks, some of everything else.
func DefaultSoakMix() map[SoakOp]int {
	return map[SoakOp]int{SoakAcquire: 6, SoakTry: 3, SoakDo: 1, SoakSemaphore: 2, SoakMulti: 1, SoakElect: 1}
}

// ParseSoakMix parses a mix such as "acquire=4,try=2,do=1" (an operation
// left out has weight 0). It returns an error naming the valid operations
// for an unknown one, and for a weight that is not a whole number ≥ 0 or a
// mix whose weights are all 0.
func ParseSoakMix(s string) (map[SoakOp]int, error) {
	mix := map[SoakOp]int{}
	total := 0
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, ok := strings.Cut(part, "=")
		if !ok {
			w = "1"
		}
		op := SoakOp(strings.ToLower(strings.TrimSpace(name)))
		if !slices.Contains(soakOps, op) {
			return nil, fmt.Errorf("chaos: unknown soak operation %q (want one of %s)", name, joinOps(soakOps))
		}
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("chaos: weight of %s: %q is not a whole number ≥ 0", op, w)
		}
		mix[op] = n
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("chaos: soak mix %q has no operation with a weight above 0", s)
	}
	return mix, nil
}

func joinOps(ops []SoakOp) string {
	s := make([]string, len(ops))
	for i, o := range ops {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

// SoakOptions configures Soak. The zero value is the full soak: 1,000
// clients over 8 redlock.Client values on 64 keys of 5 redis-servers for
// 10 minutes, TTL 1 s, the default fault schedule.
type SoakOptions struct {
	// Clients is the number of client goroutines; 0 means 1000.
	Clients int
	// Conns is the number of redlock.Client values the goroutines share
	// (goroutine i uses Client i mod Conns), as processes with many
	// goroutines each would; 0 means 8.
	Conns int
	// Keys is the number of lock keys; 0 means 64. Goroutine i works on
	// key i mod Keys.
	Keys int
	// Nodes is the number of redis-servers the soak starts; 0 means 5.
	Nodes int
	// Duration is how long the clients run; 0 means 10 minutes.
	Duration time.Duration
	// TTL is the locks' TTL; 0 means 1 s. It must be at least 100 ms.
	TTL time.Duration
	// NodeTimeout is the clients' per-node timeout (WithNodeTimeout); 0
	// is the library's default for the TTL. A loaded machine needs more
	// than the default's 100 ms: a call that times out costs a vote and its
	// connection, and redials through a busy machine time out in turn.
	NodeTimeout time.Duration
	// PoolSize is the most connections each redlock client keeps to a
	// node; 0 means 32.
	PoolSize int
	// Hold is how long an acquire, try, semaphore or multi holder works;
	// 0 means 20 ms. Do and elect hold for TTL/2.
	Hold time.Duration
	// Think is the mean pause of a client between two operations (drawn
	// from 0 to 2 × Think), as a worker between two jobs; 0 means 2 s.
	// With a thousand clients on a shared machine it keeps the offered
	// load below what the machine can serve: without it every call waits
	// behind the others until the TTLs are spent, and nothing is
	// acquired at all.
	Think time.Duration
	// Mix weighs the operations; nil means DefaultSoakMix.
	Mix map[SoakOp]int
	// FaultEvery is the time from one fault of the schedule to the next;
	// 0 means 5 s. Faults never overlap: each is undone before the next.
	FaultEvery time.Duration
	// NoPersistence runs the servers without their AOF: a kill-restart
	// then loses the node's data as kill-amnesia does.
	NoPersistence bool
	// NoFaults runs the load without a fault schedule.
	NoFaults bool
	// Unsafe adds the documented-unsafe faults to the schedule; what the
	// oracles find during them (and for 3 × TTL after) is counted apart,
	// in SoakReport.Unsafe.
	Unsafe bool
	// Mutant names a mutant of the lock (see Mutants) every client is
	// made; "" is the library as built.
	Mutant string
	// Seed seeds the operation mix and the fault schedule; 0 picks one.
	Seed uint64
	// RedisBinary is the redis-server executable; "" looks it up on PATH.
	RedisBinary string
	// SampleEvery is the time between two samples of goroutines, heap and
	// connections; 0 means 10 s.
	SampleEvery time.Duration
	// Progress, if not nil, is called once a second, from one goroutine,
	// with the last second's figures.
	Progress func(SoakProgress)
}

// Check returns the error Soak would return for o's settings (a count,
// duration, TTL or mix it refuses) without starting anything.
func (o SoakOptions) Check() error {
	_, err := o.withDefaults()
	return err
}

func (o SoakOptions) withDefaults() (SoakOptions, error) {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&o.Clients, 1000)
	def(&o.Conns, 8)
	def(&o.Keys, 64)
	def(&o.Nodes, DefaultNodes)
	def(&o.PoolSize, 32)
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	defD(&o.Duration, 10*time.Minute)
	defD(&o.TTL, time.Second)
	defD(&o.Hold, 20*time.Millisecond)
	defD(&o.Think, 2*time.Second)
	defD(&o.FaultEvery, 5*time.Second)
	defD(&o.SampleEvery, 10*time.Second)
	if o.Mix == nil {
		o.Mix = DefaultSoakMix()
	}
	switch {
	case o.Clients < 1 || o.Conns < 1 || o.Keys < 1 || o.PoolSize < 1:
		return o, fmt.Errorf("chaos: soak needs at least 1 client, conn, key and pooled connection (got %d, %d, %d, %d)", o.Clients, o.Conns, o.Keys, o.PoolSize)
	case o.Nodes < 3:
		return o, fmt.Errorf("chaos: soak needs at least 3 nodes (its faults hit a minority), got %d", o.Nodes)
	case o.Duration < 0 || o.Hold < 0 || o.Think < 0 || o.FaultEvery < 0 || o.SampleEvery < 0:
		return o, errors.New("chaos: soak durations must not be negative")
	case o.TTL < 100*time.Millisecond:
		return o, fmt.Errorf("chaos: soak TTL %v is below 100 ms", o.TTL)
	case o.Hold >= o.TTL/2:
		return o, fmt.Errorf("chaos: soak hold %v must be below TTL/2 (%v)", o.Hold, o.TTL/2)
	}
	total := 0
	for op, w := range o.Mix {
		if !slices.Contains(soakOps, op) {
			return o, fmt.Errorf("chaos: unknown soak operation %q (want one of %s)", op, joinOps(soakOps))
		}
		if w < 0 {
			return o, fmt.Errorf("chaos: weight of %s is negative", op)
		}
		total += w
	}
	if total == 0 {
		return o, errors.New("chaos: soak mix has no operation with a weight above 0")
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return o, nil
}

// SoakProgress is one second of a running soak.
type SoakProgress struct {
	Elapsed    time.Duration // since the clients started
	OpsPerSec  float64       // acquisitions (locks, permits, leaderships) in the last second
	FailPerSec float64       // failed acquisitions in the last second
	Faults     int           // faults applied so far
	Violations int           // defects the oracles found so far (judged windows only)
}

// String is the progress line `redlock soak` prints.
func (p SoakProgress) String() string {
	return fmt.Sprintf("%8s  %6.0f acq/s  %5.0f failed/s  %3d faults  %d violations",
		p.Elapsed.Truncate(time.Second), p.OpsPerSec, p.FailPerSec, p.Faults, p.Violations)
}

// SoakPoint is one second of the soak's load, for the plots.
type SoakPoint struct {
	T        time.Duration // end of the second, since the clients started
	Acquired int           // acquisitions in that second
	Failed   int           // failed acquisitions in that second
	P50, P99 time.Duration // latency of that second's acquisitions
}

// SoakSample is one sample of the process and the nodes.
type SoakSample struct {
	T          time.Duration // since the clients started
	Goroutines int           // runtime.NumGoroutine
	HeapBytes  uint64        // live heap after a GC (runtime.MemStats.HeapAlloc)
	Conns      []int         // connected_clients of each node (INFO clients); -1 when it did not answer
}

// SoakFault is one fault of the schedule as it was applied.
type SoakFault struct {
	At     time.Duration // since the clients started
	For    time.Duration // until it was undone
	Name   string        // the schedule's name for it, e.g. "kill-restart"
	Detail string        // nodes or client hit
	Unsafe bool          // a documented-unsafe fault (SoakOptions.Unsafe)
}

// SoakOpStats counts one operation's calls.
type SoakOpStats struct {
	Acquired int // calls that took the lock (or permit, or leadership)
	Failed   int // calls that did not (held elsewhere, no quorum, timed out)
}

// SoakCounts are what the oracles found (see Soak for the definitions).
type SoakCounts struct {
	// Holds counts the holds judged.
	Holds int
	// FencedWrites counts writes to the fenced registers; FencedRefused
	// those refused (a token below the register's: the stale writes of
	// paused clients, refused as they must be).
	FencedWrites, FencedRefused int
	// Overlaps counts pairs of holds of one key by different clients whose
	// believed-held intervals overlap: two clients told at once that they
	// held the lock. A defect.
	Overlaps int
	// LateWriteOverlaps counts pairs that overlap only because a paused
	// client wrote after its validity ended (the client-pause fault).
	// Expected; the fenced register must refuse those writes.
	LateWriteOverlaps int
	// StaleAccepted counts stale writes a fenced register accepted. A
	// defect.
	StaleAccepted int
	// StalePlain counts stale writes the plain resource (which checks
	// nothing) took: what fencing protects against. Expected with pauses.
	StalePlain int
	// TokensOutOfOrder counts consecutive holds of a key, by acquisition
	// time, whose fencing tokens did not strictly increase. A defect.
	TokensOutOfOrder int
	// First lists up to 20 of the defects.
	First []SoakViolation
}

// Defects is the number of defects: overlaps, stale writes accepted by a
// fenced register, tokens out of order.
func (c SoakCounts) Defects() int { return c.Overlaps + c.StaleAccepted + c.TokensOutOfOrder }

func (c *SoakCounts) add(o SoakCounts) {
	c.Holds += o.Holds
	c.FencedWrites += o.FencedWrites
	c.FencedRefused += o.FencedRefused
	c.Overlaps += o.Overlaps
	c.LateWriteOverlaps += o.LateWriteOverlaps
	c.StaleAccepted += o.StaleAccepted
	c.StalePlain += o.StalePlain
	c.TokensOutOfOrder += o.TokensOutOfOrder
	for _, v := range o.First {
		if len(c.First) < 20 {
			c.First = append(c.First, v)
		}
	}
}

// SoakViolation is one defect a soak found.
type SoakViolation struct {
	Key  string        // the lock key
	At   time.Duration // since the clients started
	What string        // what was seen
}

// SoakReport is the outcome of a soak. OK says whether it passed.
type SoakReport struct {
	Options SoakOptions   // the options, defaults filled in (Progress dropped)
	Clocks  string        // how the nodes' clocks moved (Cluster.Clocks)
	Elapsed time.Duration // how long the clients ran
	Ops     map[SoakOp]SoakOpStats
	// FailureReasons counts the failed acquisitions by why they failed
	// (failReason).
	FailureReasons map[string]int
	// Counts are the oracles' findings outside the unsafe faults' windows;
	// Unsafe those inside (only with SoakOptions.Unsafe).
	Counts, Unsafe SoakCounts
	Faults         []SoakFault
	Series         []SoakPoint  // one a second
	Samples        []SoakSample // one every SampleEvery
	// KeysLeft lists (up to 20 of) the keys of the soak found on a node
	// once every TTL had passed after the clients stopped, other than the
	// fencing counters and amnesia-guard epochs the library keeps by
	// design; NKeysLeft counts them all. Bookkeeping counts those.
	KeysLeft    []string
	NKeysLeft   int
	Bookkeeping int
	// GoroutinesBefore and GoroutinesAfter are runtime.NumGoroutine
	// before the cluster started and after every client was closed.
	GoroutinesBefore, GoroutinesAfter int
	// ConnBound is the most connections a node may see: Conns × PoolSize
	// pooled ones and as many again still closing (a connection go-redis
	// dropped is closed on the node's side by the fault proxy a moment
	// later), one pub/sub connection (release notices, an election's watch)
	// per goroutine, and 50 for the harness's own; MaxConns the most any
	// sample saw.
	ConnBound, MaxConns int
	// Leaks lists the resource bounds that failed (goroutines or heap
	// growing after warm-up, connections over ConnBound, goroutines left
	// after Close).
	Leaks []string
	// Errors lists unexpected errors of the library (a refused argument, a
	// closed client).
	Errors []string
	// FaultErrors lists faults the harness could not apply or undo (a
	// restarted redis-server that did not answer in time on a loaded
	// machine): not a defect of the lock, but the schedule was not the
	// one planned.
	FaultErrors []string
}

// OK reports whether the soak passed: no defect outside the unsafe
// faults' windows, no key left, no leak, no unexpected error.
func (r SoakReport) OK() bool {
	return r.Counts.Defects() == 0 && r.NKeysLeft == 0 && len(r.Leaks) == 0 && len(r.Errors) == 0
}

// soakRun is one running soak.
type soakRun struct {
	opt     SoakOptions
	cluster *Cluster
	start   time.Time
	clients []client

	jmu    sync.Mutex
	judges map[string]*keyJudge

	mu       sync.Mutex
	acquired map[SoakOp]int
	fails    map[SoakOp]int
	lat      []time.Duration // this second's acquisition latencies
	secAcq   int
	secFail  int
	faults   []SoakFault
	unsafeAt [][2]time.Duration // windows whose findings count as unsafe
	errs     []string
	ferrs    []string
	reasons  map[string]int
	counts   SoakCounts
	unsafe   SoakCounts

	pauses atomic.Int32 // client pauses waiting for a holder to take them
	nfault atomic.Int32
}

// Soak runs the soak opt describes on redis-servers it starts (and stops):
// opt.Clients goroutines over opt.Conns redlock clients loop over the
// operations of opt.Mix on opt.Keys keys for opt.Duration, while the fault
// schedule (soakSchedule) kills, restarts, stops and cuts off nodes and
// freezes clients. It returns the report, or an error when the soak could
// not run (bad options, no redis-server, a node that does not start, a
// cluster that cannot be healed); a soak that found defects returns them in
// the report with a nil error.
//
// The oracles are the chaos harness's, per key: every hold writes its
// fencing token to the key's fenced register (fencing.Register) and the
// oracle (internal/oracle) judges the believed-held intervals on this
// process's clock, the writes and the tokens, one 5 s window at a time
// (each judged once its holds have ended, against the holds of the next
// that overlapped them). At the end every node is scanned for keys left.
func Soak(ctx context.Context, opt SoakOptions) (SoakReport, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return SoakReport{}, err
	}
	var mutant *Mutant
	if opt.Mutant != "" {
		m, ok := findMutant(opt.Mutant)
		if !ok {
			return SoakReport{}, fmt.Errorf("chaos: unknown mutant %q", opt.Mutant)
		}
		if m.NotCovered != "" {
			return SoakReport{}, fmt.Errorf("chaos: mutant %s cannot run: %s", m.Name, m.NotCovered)
		}
		if err := m.check(); err != nil {
			return SoakReport{}, err
		}
		mutant = &m
	}
	progress := opt.Progress
	opt.Progress = nil
	rep := SoakReport{Options: opt, GoroutinesBefore: runtime.NumGoroutine(),
		ConnBound: 2*opt.Conns*opt.PoolSize + opt.Clients + 50}

	cluster, err := NewCluster(ctx, ClusterOptions{Backend: RedisServer, Nodes: opt.Nodes, Persistence: !opt.NoPersistence, RedisBinary: opt.RedisBinary})
	if err != nil {
		return rep, err
	}
	closed := false
	defer func() {
		if !closed {
			_ = cluster.Close()
		}
	}()
	rep.Clocks = cluster.Clocks()
	r := &soakRun{opt: opt, cluster: cluster, judges: map[string]*keyJudge{},
		acquired: map[SoakOp]int{}, fails: map[SoakOp]int{}, reasons: map[string]int{}}
	if err := r.connect(ctx, mutant); err != nil {
		return rep, err
	}

	r.start = time.Now()
	runCtx, stopClients := context.WithTimeout(ctx, opt.Duration)
	defer stopClients()
	faultOracle := oracle.NewOracle()
	inj := newInjector(cluster, faultOracle, opt.Seed)

	var wg, bg sync.WaitGroup
	for i := range opt.Clients {
		wg.Go(func() { r.clientLoop(runCtx, i) })
	}
	bgCtx, stopBG := context.WithCancel(ctx)
	bg.Go(func() { r.meter(bgCtx, progress, &rep) })
	bg.Go(func() { r.sampler(bgCtx, &rep) })
	if !opt.NoFaults {
		wg.Go(func() { r.schedule(runCtx, inj) })
	}
	wg.Wait()
	rep.Elapsed = time.Since(r.start)
	inj.stop()
	stopBG()
	bg.Wait()

	heal, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	herr := cluster.HealAll(heal)
	if err := inj.firstErr(); err != nil {
		r.addFaultErr("fault schedule: " + err.Error())
	}
	r.judgeAll(time.Now(), true)
	closeClients(r.clients)
	if herr != nil {
		return rep, fmt.Errorf("chaos: soak: heal the cluster: %w", herr)
	}

	// Every lock, permit and leadership had a TTL: once it has passed, no
	// key of the soak may be left but the bookkeeping.
	sleepCtx(heal, 2*opt.TTL+200*time.Millisecond)
	if err := r.scanKeys(heal, &rep); err != nil {
		return rep, err
	}
	closed = true
	if err := cluster.Close(); err != nil {
		return rep, fmt.Errorf("chaos: soak: close the cluster: %w", err)
	}
	rep.GoroutinesAfter = waitGoroutines(rep.GoroutinesBefore+5, 10*time.Second)
	r.finish(&rep)
	return rep, nil
}

// connect makes the soak's redlock clients (with mutant's options and
// script rewrites when it is not nil) and warms each up on a key of its
// own.
func (r *soakRun) connect(ctx context.Context, mutant *Mutant) error {
	opts := []redlock.Option{redlock.WithFencing(true)}
	if r.opt.NodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(r.opt.NodeTimeout))
	}
	var hook redis.Hook
	if mutant != nil {
		opts = append(opts, mutant.options()...)
		h, err := mutant.hook()
		if err != nil {
			return err
		}
		hook = h
	}
	for range r.opt.Conns {
		c, err := soakDial(r.cluster.Addrs(), hook, opts, r.opt.PoolSize)
		if err != nil {
			closeClients(r.clients)
			return err
		}
		if mutant != nil {
			c.mutant = mutant.knobs
		}
		r.clients = append(r.clients, c)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, len(r.clients))
	for i, c := range r.clients {
		wg.Go(func() { errs[i] = warmUp(wctx, c, fmt.Sprintf("soak:warmup:%d", i), true) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		closeClients(r.clients)
		return fmt.Errorf("chaos: soak: warm-up: %w", err)
	}
	return nil
}

// soakDialTimeout bounds one dial of a soak client to a node. The chaos
// trials' 100 ms is too short on a loaded machine with thousands of
// clients: go-redis stops dialing a node for a second after PoolSize failed
// dials, and the soak's clients then lose that node's votes over and over.
const soakDialTimeout = time.Second

// soakDial returns a redlock client over addrs whose node connections are
// made as Cluster.Client's but with a 1 s dial timeout (soakDialTimeout), a
// pool of at most pool connections per node and 4 KiB buffers: a soak's
// thousands of concurrent calls would otherwise open a connection (with 64
// KiB of buffers) per call in flight. A call waits for a free connection
// before its per-node timeout starts.
func soakDial(addrs []string, hook redis.Hook, opts []redlock.Option, pool int) (client, error) {
	conns := make([]redis.UniversalClient, len(addrs))
	closeConns := func() {
		for _, rc := range conns {
			if rc != nil {
				_ = rc.Close()
			}
		}
	}
	for i, a := range addrs {
		rc := redlock.NewNodeClient(a, func(o *redis.Options) {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = soakDialTimeout, clientIOTimeout, clientIOTimeout
			o.PoolSize = pool
			o.ReadBufferSize, o.WriteBufferSize = 4<<10, 4<<10
			o.Dialer = lingerlessDial
		})
		if hook != nil {
			rc.AddHook(hook)
		}
		conns[i] = rc
	}
	c, err := redlock.New(conns, opts...)
	if err != nil {
		closeConns()
		return client{}, err
	}
	return client{Client: c, close: func() {
		_ = c.Close()
		closeConns()
	}}, nil
}

// lingerlessDial dials a node connection whose Close resets it instead of
// leaving it in TIME_WAIT for a minute. go-redis closes a connection whose
// call was cut short (a vote decided without a straggler, a per-node
// timeout), so a soak closes a few connections per acquisition; at a
// hundred acquisitions a second their TIME_WAIT sockets exhaust the
// loopback's ephemeral ports within a minute, and every dial then stalls.
func lingerlessDial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	return c, nil
}

// keyName is the name of lock key k.
func keyName(k int) string { return fmt.Sprintf("soak:%02d", k) }

// judge returns the judge of lock key key, making it on first use.
func (r *soakRun) judge(key string) *keyJudge {
	r.jmu.Lock()
	defer r.jmu.Unlock()
	j := r.judges[key]
	if j == nil {
		j = newKeyJudge(key, r.start)
		r.judges[key] = j
	}
	return j
}

// judgeAll judges every key's finished windows (all when final) and adds
// the findings to the run's counts.
func (r *soakRun) judgeAll(now time.Time, final bool) {
	r.jmu.Lock()
	judges := make([]*keyJudge, 0, len(r.judges))
	for _, j := range r.judges {
		judges = append(judges, j)
	}
	r.jmu.Unlock()
	for _, j := range judges {
		safe, unsafe := j.judge(now, final, r.isUnsafe)
		r.mu.Lock()
		r.counts.add(safe)
		r.unsafe.add(unsafe)
		r.mu.Unlock()
	}
}

// isUnsafe reports whether a finding at t (since the start) falls in an
// unsafe fault's window.
func (r *soakRun) isUnsafe(t time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.unsafeAt {
		if t >= w[0] && t <= w[1] {
			return true
		}
	}
	return false
}

func (r *soakRun) addErr(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.errs) < 20 {
		r.errs = append(r.errs, s)
	}
}

func (r *soakRun) addFaultErr(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ferrs) < 20 {
		r.ferrs = append(r.ferrs, firstLine(s))
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// failReason says why an acquisition failed, in a few words.
func failReason(err error) string {
	var qe *redlock.QuorumError
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
		return "gave up waiting (2 × TTL)"
	case errors.Is(err, redlock.ErrTaken):
		return "held by another client"
	case errors.Is(err, redlock.ErrNoQuorum):
		return "too few nodes answered"
	case errors.As(err, &qe):
		return "no majority granted"
	}
	return firstLine(err.Error())
}

// done records the outcome of one acquisition call of op; err is why it
// failed.
func (r *soakRun) done(op SoakOp, err error, latency time.Duration) {
	ok := err == nil
	r.mu.Lock()
	defer r.mu.Unlock()
	if !ok && len(r.reasons) < 50 {
		r.reasons[failReason(err)]++
	}
	if ok {
		r.acquired[op]++
		r.secAcq++
		r.lat = append(r.lat, latency)
	} else {
		r.fails[op]++
		r.secFail++
	}
}

// meter closes each second's figures, judges the finished windows and
// reports progress, until ctx ends.
func (r *soakRun) meter(ctx context.Context, progress func(SoakProgress), rep *SoakReport) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			t := now.Sub(r.start)
			r.judgeAll(now, false)
			r.mu.Lock()
			lat := r.lat
			p := SoakPoint{T: t, Acquired: r.secAcq, Failed: r.secFail}
			r.lat, r.secAcq, r.secFail = make([]time.Duration, 0, len(lat)), 0, 0
			viol := r.counts.Defects()
			r.mu.Unlock()
			p.P50, p.P99 = oracle.Percentile(lat, 50), oracle.Percentile(lat, 99)
			r.mu.Lock()
			rep.Series = append(rep.Series, p)
			r.mu.Unlock()
			if progress != nil {
				progress(SoakProgress{Elapsed: t, OpsPerSec: float64(p.Acquired), FailPerSec: float64(p.Failed),
					Faults: int(r.nfault.Load()), Violations: viol})
			}
		}
	}
}

// sampler takes a sample at once and every SampleEvery until ctx ends.
func (r *soakRun) sampler(ctx context.Context, rep *SoakReport) {
	tick := time.NewTicker(r.opt.SampleEvery)
	defer tick.Stop()
	for {
		s := r.sample(ctx, time.Since(r.start))
		r.mu.Lock()
		rep.Samples = append(rep.Samples, s)
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sample takes one sample of the process (after a GC, so the heap is the
// live heap) and of each node's connections.
func (r *soakRun) sample(ctx context.Context, t time.Duration) SoakSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := SoakSample{T: t, Goroutines: runtime.NumGoroutine(), HeapBytes: ms.HeapAlloc}
	for _, n := range r.cluster.Nodes() {
		s.Conns = append(s.Conns, nodeConns(ctx, n))
	}
	return s
}

// nodeConns returns the node's connected_clients (INFO clients), asking
// the server directly, or -1 when it is down, stopped or does not answer.
func nodeConns(ctx context.Context, n *Node) int {
	killed, paused, err := n.state()
	if err != nil || killed || paused {
		return -1
	}
	ictx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	info, err := n.admin.Info(ictx, "clients").Result()
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_clients:"); ok {
			if c, err := strconv.Atoi(v); err == nil {
				return c
			}
		}
	}
	return -1
}

// scanKeys lists the soak's keys left on every node (SCAN, each server
// asked directly).
func (r *soakRun) scanKeys(ctx context.Context, rep *SoakReport) error {
	keys, err := r.cluster.keys(ctx, "*soak:*")
	if err != nil {
		return fmt.Errorf("chaos: soak: scan the nodes: %w", err)
	}
	nodes := make([]int, 0, len(keys))
	for i := range keys {
		nodes = append(nodes, i)
	}
	sort.Ints(nodes)
	for _, i := range nodes {
		for _, k := range keys[i] {
			if strings.HasSuffix(k, ":fence") || strings.HasSuffix(k, ":epoch") {
				rep.Bookkeeping++
				continue
			}
			rep.NKeysLeft++
			if len(rep.KeysLeft) < 20 {
				rep.KeysLeft = append(rep.KeysLeft, fmt.Sprintf("node%d: %s", i, k))
			}
		}
	}
	if len(keys) < len(r.cluster.Nodes()) {
		r.addErr(fmt.Sprintf("only %d of %d nodes were up for the final scan", len(keys), len(r.cluster.Nodes())))
	}
	return nil
}

// waitGoroutines waits up to d for the number of goroutines to fall to at
// most want (go-redis's dial probes outlive Close by up to a second) and
// returns the last count.
func waitGoroutines(want int, d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finish copies the run's figures into rep and checks the resource bounds.
func (r *soakRun) finish(rep *SoakReport) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rep.Ops = map[SoakOp]SoakOpStats{}
	for _, op := range soakOps {
		if r.acquired[op] > 0 || r.fails[op] > 0 {
			rep.Ops[op] = SoakOpStats{Acquired: r.acquired[op], Failed: r.fails[op]}
		}
	}
	rep.Counts, rep.Unsafe = r.counts, r.unsafe
	rep.FailureReasons = maps.Clone(r.reasons)
	rep.Faults = slices.Clone(r.faults)
	rep.Errors = slices.Clone(r.errs)
	rep.FaultErrors = slices.Clone(r.ferrs)
	rep.Leaks = append(rep.Leaks, boundLeaks(rep.Samples, rep.ConnBound, &rep.MaxConns)...)
	if rep.GoroutinesAfter > rep.GoroutinesBefore+5 {
		rep.Leaks = append(rep.Leaks, fmt.Sprintf("%d goroutines after every client and node was closed, %d before the soak",
			rep.GoroutinesAfter, rep.GoroutinesBefore))
	}
}

// soakWarmUp is the shortest warm-up of the growth bounds.
const soakWarmUp = 30 * time.Second

// Slack of the growth bounds: what a sample may exceed the warm-up's
// largest by, on top of half of it.
const (
	goroutineSlack = 200
	heapSlack      = 32 << 20
)

// boundLeaks checks the samples: after warm-up (the samples of the first
// fifth of the run and at least of its first 30 s, after the one taken at
// the start; a shorter run is not checked for growth), goroutines and heap stay within 1.5 × the
// warm-up's largest plus a slack (goroutineSlack, heapSlack), and no node
// ever had more than bound connections (maxConns gets the most seen). It
// returns the bounds that failed.
func boundLeaks(samples []SoakSample, bound int, maxConns *int) []string {
	var out []string
	for _, s := range samples {
		for i, c := range s.Conns {
			*maxConns = max(*maxConns, c)
			if c > bound {
				out = append(out, fmt.Sprintf("node%d had %d connections at %v (bound %d)", i, c, s.T.Truncate(time.Second), bound))
			}
		}
	}
	if len(samples) < 3 {
		return out
	}
	// The first sample is taken as the clients start: warm-up is the
	// samples after it in the first fifth of the run, and at least its
	// first 30 s (the pools, the leases and the judges' windows fill up).
	last := samples[len(samples)-1].T
	warmEnd := max(last/5, soakWarmUp)
	warm := 1
	for warm < len(samples) && samples[warm].T <= warmEnd {
		warm++
	}
	if warm == len(samples) {
		return out // too short a run to see growth
	}
	var g int
	var h uint64
	for _, s := range samples[1:warm] {
		g, h = max(g, s.Goroutines), max(h, s.HeapBytes)
	}
	for _, s := range samples[warm:] {
		if s.Goroutines > g+g/2+goroutineSlack {
			out = append(out, fmt.Sprintf("%d goroutines at %v, %d at most during warm-up", s.Goroutines, s.T.Truncate(time.Second), g))
			break
		}
	}
	for _, s := range samples[warm:] {
		if s.HeapBytes > h+h/2+heapSlack {
			out = append(out, fmt.Sprintf("heap %.1f MB at %v, %.1f MB at most during warm-up", mb(s.HeapBytes), s.T.Truncate(time.Second), mb(h)))
			break
		}
	}
	return out
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }

// pickOp draws an operation from the mix.
func pickOp(rng *rand.Rand, mix map[SoakOp]int) SoakOp {
	total := 0
	for _, op := range soakOps {
		total += mix[op]
	}
	n := rng.IntN(total)
	for _, op := range soakOps {
		if n < mix[op] {
			return op
		}
		n -= mix[op]
	}
	return SoakAcquire
}
