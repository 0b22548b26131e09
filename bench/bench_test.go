package bench

// Side-by-side benchmarks, cases 1-7 (see docs/benchmarks.md).
// Run them all with ./run.sh. Every case runs every library in the same
// process on the same redis-server nodes; metrics besides ns/op, B/op and
// allocs/op are reported with b.ReportMetric:
//
//	p50-us, p99-us   latency of one acquire + release, microseconds
//	acq-p50-us       latency of the acquisition alone
//	rel-p50-us       latency of the release alone
//	cpu-us/op        user + system CPU time of the benchmark process per
//	                 operation (the client's cost; the nodes are apart)
//	cmds/op          commands the nodes processed per operation, counting
//	                 those a Lua script runs (INFO total_commands_processed)
//	node-cmd-us/op   time the nodes spent in the commands the library sent
//	                 (INFO commandstats usec, scripts whole), per operation
//	node-cpu-us/op   CPU time of the redis-server processes (INFO cpu,
//	                 network I/O included), per operation
//	fails            operations that returned an error (expected: 0)
//	stale-keys       lock keys left on any live node after the case
//	                 (checked after every invocation, summed)
//	lost-node-keys   case 4 "host": keys left on the unreachable node
//	worst-ms         case 4: the slowest single operation; worst-acq-ms and
//	                 worst-rel-ms the slowest acquisition and release
//	stall-ms         case 4: the worst extra delay of a 1 ms sleep in this
//	                 process during the run (machine or runtime stalls)
//	ops/s            case 6: operations per second, 16 goroutines
//	acq/s, wait-*    case 5: see BenchmarkC5Contention
//
// Lock keys are "bench:LANE:INDEX"; every goroutine ("lane") cycles through
// its own 4096 keys, so no two goroutines share a key (except in case 5) and
// building keys costs no allocation during the timed loop.

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/chaos"
)

const (
	poolSize = 9    // nodes started for the whole run (case 7 needs 9)
	keyRing  = 4096 // keys per lane
	lanesN   = 16   // goroutines of cases 5 and 6
	// killWorkers is the number of goroutines of case 4, so that operations
	// are in flight when the node dies.
	killWorkers = 4
	// contendFor is the fixed duration of case 5, per library.
	contendFor = 4 * time.Second
	// hold is how long a case 5 holder keeps the lock before releasing.
	hold = time.Millisecond
	// slowReply is the reply delay of the slow node in case 2.
	slowReply = 5 * time.Millisecond
)

var (
	poolOnce sync.Once
	pool     []*Server
	poolErr  error

	lanes = func() [][]string {
		l := make([][]string, lanesN)
		for g := range l {
			l[g] = make([]string, keyRing)
			for i := range l[g] {
				l[g][i] = fmt.Sprintf("bench:%02d:%04d", g, i)
			}
		}
		return l
	}()

	adminMu sync.Mutex
	admins  = map[string]*redis.Client{}
	staleMu sync.Mutex
	stale   = map[string]int{} // benchmark name -> stale keys found, summed
)

// quietLogger counts go-redis's log lines (refused dials and connections
// closed under faults are expected here) instead of printing them.
type quietLogger struct{ n atomic.Int64 }

func (l *quietLogger) Printf(context.Context, string, ...any) { l.n.Add(1) }

var redisLog quietLogger

// youngNodes (REDLOCK_BENCH_NODES=young; bench/run.sh NODES=young) runs the
// cases on young nodes, as a cluster is for one longest TTL after its
// nodes start or are flushed: no wait for the nodes to grow old, and every
// flush a FLUSHALL (which removes each node's marker: the next Client
// creates it again, and the node is young for LongestTTL from then). The
// default is old nodes: see ageNodes.
var youngNodes = os.Getenv("REDLOCK_BENCH_NODES") == "young"

// ageReports are ageNodes' lines, printed by TestMain after the run (in a
// benchmark's output they would split its result line).
var (
	ageMu      sync.Mutex
	ageReports []string
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(delayProxyEnv); spec != "" {
		os.Exit(serveDelayProxies(spec)) // a child started by startDelayProxies
	}
	redis.SetLogger(&redisLog)
	code := m.Run()
	if n := redisLog.n.Load(); n > 0 {
		fmt.Printf("go-redis logged %d lines (refused dials, connections closed under faults); not shown\n", n)
	}
	if youngNodes {
		fmt.Println("# nodes: young (REDLOCK_BENCH_NODES=young): every flush a FLUSHALL, no wait; a node's fresh grants go by the per-key rule for LongestTTL after a flush")
	}
	for _, r := range ageReports {
		fmt.Println("# nodes: " + r)
	}
	for _, s := range pool {
		s.Close()
	}
	for _, s := range sparesAll {
		s.Close()
	}
	for _, c := range admins {
		c.Close()
	}
	os.Exit(code)
}

// nodes returns the first n of the run's redis-server nodes, starting all
// of them on first use and making them old (ageNodes) before any case
// uses them.
func nodes(b *testing.B, n int) []*Server {
	b.Helper()
	poolOnce.Do(func() {
		pool, poolErr = startServers(poolSize)
		if poolErr == nil {
			poolErr = ageNodes(pool, "the pool")
		}
		if poolErr != nil {
			for _, s := range pool {
				s.Close()
			}
			pool = nil
		}
	})
	if poolErr != nil {
		if strings.Contains(poolErr.Error(), "not found on PATH") {
			b.Skip(poolErr)
		}
		b.Fatal(poolErr)
	}
	return pool[:n]
}

// startServers starts n redis-servers at once; on an error it stops those
// it started.
func startServers(n int) ([]*Server, error) {
	srv := make([]*Server, n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range srv {
		wg.Go(func() {
			s, err := StartServer(context.Background())
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			srv[i] = s
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		for _, s := range srv {
			if s != nil {
				s.Close()
			}
		}
		return nil, errs[0]
	}
	return srv, nil
}

// ageNodes makes the nodes of srv old for LongestTTL, as the nodes of a
// production cluster are once they have run for longer than its longest
// TTL: the amnesia guard counts a verified node's grant of a fresh name at
// once only then (docs/amnesia.md, "Per-node incarnation"); before, the
// per-key rule decides it and a name's first use waits for every node. A
// Client of ours acquires once, so that it reads every node's incarnation
// (which creates each node's marker); then ageNodes reads every node's
// uptime and marker age (ReadNodeAge) and sleeps until the oldest
// requirement left is met, reading them again until each is at least
// LongestTTL. One wait per set of servers: flush keeps the markers, so
// the nodes stay old for the whole run. With youngNodes it does nothing.
func ageNodes(srv []*Server, what string) error {
	if youngNodes {
		return nil
	}
	ctx := context.Background()
	start := time.Now()
	im, err := NewImpl(Ours, addrsOf(srv))
	if err != nil {
		return err
	}
	_, _, err = im.Op(ctx, "bench:age")
	for t := time.Now(); !IncarnationsRead(im) && time.Since(t) < 5*time.Second; {
		time.Sleep(10 * time.Millisecond)
	}
	im.Close()
	if err != nil {
		return fmt.Errorf("ageing %s: %w", what, err)
	}
	deadline := start.Add(LongestTTL + 30*time.Second)
	for {
		ages := make([]NodeAge, len(srv))
		var left time.Duration
		for i, s := range srv {
			a, err := ReadNodeAge(ctx, admin(s.Addr()))
			if err != nil {
				return fmt.Errorf("ageing %s: %w", what, err)
			}
			ages[i] = a
			if !a.Marked {
				left = max(left, 50*time.Millisecond) // the Client's check is still writing it
			}
			left = max(left, a.Left(LongestTTL))
		}
		if left == 0 {
			youngest := ages[0]
			for _, a := range ages {
				if min(a.Uptime, a.MarkerAge) < min(youngest.Uptime, youngest.MarkerAge) {
					youngest = a
				}
			}
			r := fmt.Sprintf("%s, %d redis-servers, old for LongestTTL %v (WithQuarantine) before any case used them: waited %v; the youngest %v",
				what, len(srv), LongestTTL, time.Since(start).Round(100*time.Millisecond), youngest)
			ageMu.Lock()
			ageReports = append(ageReports, r)
			ageMu.Unlock()
			return nil
		}
		if time.Now().Add(left).After(deadline) {
			return fmt.Errorf("ageing %s: not old for %v after %v: %v", what, LongestTTL, time.Since(start), ages)
		}
		time.Sleep(left + 10*time.Millisecond)
	}
}

// spares are redis-servers for case 4 to kill, started spareBatch at a time
// and made old together (one ageNodes wait per batch, not per case);
// sparesAll are all of them, for TestMain to stop.
var (
	spareMu           sync.Mutex
	spares, sparesAll []*Server
)

// spareBatch is how many spares are started at once: case 4 "process" kills
// one per call of its benchmark function (about 3 per variant at
// -benchtime=1s, 4 variants).
const spareBatch = 12

// spareNode returns an old redis-server that no case used yet.
func spareNode(b *testing.B) *Server {
	b.Helper()
	spareMu.Lock()
	defer spareMu.Unlock()
	if len(spares) == 0 {
		batch, err := startServers(spareBatch)
		if err != nil {
			b.Fatal(err)
		}
		sparesAll = append(sparesAll, batch...)
		if err := ageNodes(batch, "case 4's spare nodes"); err != nil {
			b.Fatal(err)
		}
		spares = batch
	}
	v := spares[0]
	spares = spares[1:]
	return v
}

func addrsOf(srv []*Server) []string {
	a := make([]string, len(srv))
	for i, s := range srv {
		a[i] = s.Addr()
	}
	return a
}

func admin(addr string) *redis.Client {
	adminMu.Lock()
	defer adminMu.Unlock()
	c, ok := admins[addr]
	if !ok {
		c = AdminClient(addr)
		admins[addr] = c
	}
	return c
}

// scanKeys returns the lock keys ("bench:*", and the semaphores' permits
// "{bench:*}:permit:<slot>") on the live servers of srv, per server address.
func scanKeys(b *testing.B, srv []*Server) map[*Server][]string {
	b.Helper()
	ctx := context.Background()
	found := map[*Server][]string{}
	for _, s := range srv {
		if !s.Running() {
			continue // killed: its keys died with it
		}
		for _, pattern := range []string{"bench:*", "{bench:*}:permit:[0-9]"} {
			iter := admin(s.Addr()).Scan(ctx, 0, pattern, 1000).Iterator()
			for iter.Next(ctx) {
				found[s] = append(found[s], iter.Val())
			}
			if err := iter.Err(); err != nil {
				b.Fatalf("scan %s: %v", s.Addr(), err)
			}
		}
	}
	return found
}

// flush empties the live servers of srv (lock keys, fencing counters,
// epochs and any other key of the libraries), so the next case starts with
// no name in use, but keeps each node's incarnation keys (its marker and
// the records of the others', IncarnationKey): nobody flushes a production
// cluster's nodes, and a FLUSHALL would make every node young again
// (youngNodes does just that). No Client is open while it runs.
func flush(b *testing.B, srv []*Server) {
	b.Helper()
	for _, s := range srv {
		if s.Running() {
			if err := flushNode(context.Background(), admin(s.Addr())); err != nil {
				b.Fatalf("flush %s: %v", s.Addr(), err)
			}
		}
	}
}

// flushNode deletes every key of the node c is connected to but its
// incarnation keys; with youngNodes, every key (FLUSHALL).
func flushNode(ctx context.Context, c *redis.Client) error {
	if youngNodes {
		return c.FlushAll(ctx).Err()
	}
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "*", 5000).Result()
		if err != nil {
			return err
		}
		del := keys[:0]
		for _, k := range keys {
			if !IncarnationKey(k) {
				del = append(del, k)
			}
		}
		if len(del) > 0 {
			if err := c.Unlink(ctx, del...).Err(); err != nil {
				return err
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}

// commands returns the number of commands the live servers of srv have
// processed (INFO stats total_commands_processed, summed).
func commands(b *testing.B, srv []*Server) int64 {
	b.Helper()
	var total int64
	for _, s := range srv {
		if !s.Running() {
			continue
		}
		info, err := admin(s.Addr()).Info(context.Background(), "stats").Result()
		if err != nil {
			b.Fatalf("info %s: %v", s.Addr(), err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					b.Fatalf("info %s: %v", s.Addr(), err)
				}
				total += n
			}
		}
	}
	return total
}

// startClean flushes srv before a run, logging lock keys that work in the
// background of an earlier case left there after that case was checked.
func startClean(b *testing.B, srv []*Server) {
	b.Helper()
	for s, keys := range scanKeys(b, srv) {
		b.Logf("before the run: %d lock keys left on %s by an earlier case's background work, e.g. %q", len(keys), s.Addr(), keys[0])
	}
	flush(b, srv)
}

// checkStale counts the lock keys left on the live servers of srv once the
// library's client is closed, logs them, adds them to this benchmark's total
// and reports that total as stale-keys; keys on lost (a node that became
// unreachable, not dead) are reported apart as lost-node-keys: nothing can
// delete them before their TTL. Then it flushes the servers.
func checkStale(b *testing.B, srv []*Server, lost *Server) {
	b.Helper()
	found, onLost := 0, 0
	for s, keys := range scanKeys(b, srv) {
		if s == lost {
			onLost += len(keys)
			continue
		}
		b.Logf("%d stale lock keys on %s, e.g. %q", len(keys), s.Addr(), keys[0])
		found += len(keys)
	}
	flush(b, srv)
	staleMu.Lock()
	stale[b.Name()] += found
	total := stale[b.Name()]
	stale[b.Name()+"\x00lost"] += onLost
	totalLost := stale[b.Name()+"\x00lost"]
	staleMu.Unlock()
	b.ReportMetric(float64(total), "stale-keys")
	if lost != nil {
		b.ReportMetric(float64(totalLost), "lost-node-keys")
	}
}

// settle waits, for at most 2 s, until no lock key is left on the live
// servers of srv: a library whose Release returns before every node answered
// may still have deletes in flight from the warm-up, and a fault applied
// while they are would count warm-up keys as keys of the timed run. Keys
// still there after 2 s are logged and left, so checkStale counts them.
func settle(b *testing.B, srv []*Server) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := 0
		for _, keys := range scanKeys(b, srv) {
			left += len(keys)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Logf("before the fault: %d warm-up lock keys still on the nodes after 2 s", left)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// opStats are the per-operation results of one run.
type opStats struct {
	total, acq, rel []time.Duration
	fails           int64
	firstErr        error
	elapsed         time.Duration
	cpu             time.Duration // user + system CPU time of this process
	stall           time.Duration // worst lateness of a 1 ms sleep
}

// cpuTime returns the user + system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// stallProbe sleeps 1 ms in a loop until stop is closed and returns, on
// done, the worst extra delay of one sleep: how long this process (or the
// machine) stalled at worst, whatever the libraries did.
func stallProbe(stop <-chan struct{}) (done <-chan time.Duration) {
	out := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				out <- worst
				return
			default:
			}
			t0 := time.Now()
			time.Sleep(time.Millisecond)
			worst = max(worst, time.Since(t0)-time.Millisecond)
		}
	}()
	return out
}

// warm makes a few operations on every lane a run will use, outside the
// timer, so that connections are open before measuring.
// With ring < keyRing (names used again and again), the warm-up uses the
// run's own names, so that the run finds none of them new.
func warm(b *testing.B, im Impl, workers, ring int) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range 10 {
				key := lanes[w][keyRing-1-i]
				if ring < keyRing {
					key = lanes[w][i%ring]
				}
				if _, _, err := im.Op(context.Background(), key); err != nil {
					b.Errorf("warm-up: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// awaitIncarnations waits, at most 2 s, until im has read every node's
// incarnation (IncarnationsRead): a Client of ours reads them in the
// background from its first acquisition, and until then the per-key rule
// decides every node's fresh grants. The cases time a Client that has been
// running, not its first milliseconds.
func awaitIncarnations(b *testing.B, im Impl) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !IncarnationsRead(im) {
		if time.Now().After(deadline) {
			b.Logf("after the warm-up: some node's incarnation still unread after 2 s; the per-key rule decides its fresh grants")
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// runOps runs b.N operations of im on `workers` goroutines, goroutine w on
// lane w. If mid is not nil it is started in its own goroutine when half of
// the operations have started, and waited for before runOps returns; a
// stall probe then runs alongside. Goroutine w cycles through the first
// ring names of its lane.
func runOps(b *testing.B, im Impl, workers, ring int, mid func()) opStats {
	st := opStats{
		total: make([]time.Duration, b.N),
		acq:   make([]time.Duration, b.N),
		rel:   make([]time.Duration, b.N),
	}
	var (
		next, fails atomic.Int64
		errOnce     sync.Once
		wg          sync.WaitGroup
		midWG       sync.WaitGroup
		half        = int64(b.N / 2)
		ctx         = context.Background()
	)
	var (
		stopProbe = make(chan struct{})
		probe     <-chan time.Duration
	)
	if mid != nil {
		probe = stallProbe(stopProbe)
	}
	runtime.GC()
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			keys := lanes[w]
			for j := 0; ; j++ {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				if i == half && mid != nil {
					midWG.Go(mid)
				}
				t0 := time.Now()
				acq, rel, err := im.Op(ctx, keys[j%ring])
				st.total[i] = time.Since(t0)
				st.acq[i], st.rel[i] = acq, rel
				if err != nil {
					fails.Add(1)
					errOnce.Do(func() { st.firstErr = err })
				}
			}
		})
	}
	wg.Wait()
	st.elapsed = time.Since(start)
	st.cpu = cpuTime() - cpu0
	b.StopTimer()
	midWG.Wait()
	close(stopProbe)
	if probe != nil {
		st.stall = <-probe
	}
	st.fails = fails.Load()
	return st
}

// percentile returns the p-th percentile (nearest rank) of d, sorting d.
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(float64(len(d))*p/100+0.999999) - 1
	return d[min(max(i, 0), len(d)-1)]
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// worst is the slowest operation, acquisition and release of a run.
type worst struct{ op, acq, rel time.Duration }

// benchOps is one sub-benchmark of cases 1-4, 6 and 7: kind over addrs,
// fault applied after the warm-up, mid in the middle of the run. srv are
// the servers to check for stale keys; lost, if not nil, is one of them
// that becomes unreachable during the run.
func benchOps(b *testing.B, kind Kind, addrs []string, srv []*Server, lost *Server, workers int, fault, mid func()) (opStats, worst) {
	return benchOpsRing(b, kind, addrs, srv, lost, workers, keyRing, fault, mid)
}

// benchOpsRing is benchOps with each goroutine cycling through the first
// ring names of its lane (keyRing: nearly every acquisition is a name's
// first use; a few: names used again and again).
func benchOpsRing(b *testing.B, kind Kind, addrs []string, srv []*Server, lost *Server, workers, ring int, fault, mid func()) (opStats, worst) {
	b.ReportAllocs()
	startClean(b, srv)
	im, err := NewImpl(kind, addrs)
	if err != nil {
		b.Fatal(err)
	}
	warm(b, im, workers, ring)
	awaitIncarnations(b, im)
	if fault != nil {
		settle(b, srv)
		fault()
	}
	ctx := context.Background()
	cmds0 := commands(b, srv)
	ns0, err := readNodeStats(ctx, srv)
	if err != nil {
		b.Fatal(err)
	}
	st := runOps(b, im, workers, ring, mid)
	ns1, err := readNodeStats(ctx, srv)
	if err != nil {
		b.Fatal(err)
	}
	cmds := commands(b, srv) - cmds0 - 3*int64(len(srv)) // minus the INFO calls
	im.Close()
	if mid == nil { // a node killed mid-run takes its figures with it
		ns := ns1.sub(ns0)
		b.ReportMetric(float64(ns.cmdUsecOf(kind))/float64(b.N), "node-cmd-us/op")
		b.ReportMetric(float64(ns.cpuUsec)/float64(b.N), "node-cpu-us/op")
	}
	if st.fails > 0 {
		b.Logf("%d of %d operations failed; first error: %v", st.fails, b.N, st.firstErr)
	}
	w := worst{op: slices.Max(st.total), acq: slices.Max(st.acq), rel: slices.Max(st.rel)}
	b.ReportMetric(us(percentile(st.total, 50)), "p50-us")
	b.ReportMetric(us(percentile(st.total, 99)), "p99-us")
	b.ReportMetric(us(percentile(st.acq, 50)), "acq-p50-us")
	b.ReportMetric(us(percentile(st.rel, 50)), "rel-p50-us")
	b.ReportMetric(us(st.cpu)/float64(b.N), "cpu-us/op")
	if mid == nil { // a node killed mid-run takes its count with it
		b.ReportMetric(float64(cmds)/float64(b.N), "cmds/op")
	}
	b.ReportMetric(float64(st.fails), "fails")
	if mid != nil {
		b.ReportMetric(ms(st.stall), "stall-ms")
	}
	checkStale(b, srv, lost)
	return st, w
}

// Case 1: 5 nodes, one goroutine, acquire + release on distinct keys.
func BenchmarkC1Uncontended(b *testing.B) {
	srv := nodes(b, 5)
	for _, k := range []Kind{Ours, OursSemaphore, OursNoGuard, OursNoFence, Floor, RedsyncTuned, RedsyncDefault, Redislock} {
		b.Run(string(k), func(b *testing.B) {
			benchOps(b, k, addrsOf(srv), srv, nil, 1, nil, nil)
		})
	}
}

// faultKinds are the configurations compared under faults (cases 2-4).
var faultKinds = []Kind{Ours, Floor, RedsyncTuned, RedsyncDefault}

// noFault is the control run of cases 2 and 3: Ours through the same proxy
// with no fault, just before the faulty runs, so that "p50 with the fault /
// p50 without" compares runs seconds apart on the same topology (this
// machine's speed drifts by tens of percent over a minute).
const noFault = "ours-nofault"

// faultCase runs the control and then every faultKinds configuration with
// fault applied to the proxy in front of node 4.
func faultCase(b *testing.B, fault func(b *testing.B, p *chaos.Proxy)) {
	b.Run(noFault, func(b *testing.B) {
		withProxy(b, func(addrs []string, srv []*Server, p *chaos.Proxy) {
			benchOps(b, Ours, addrs, srv, nil, 1, nil, nil)
		})
	})
	for _, k := range faultKinds {
		b.Run(string(k), func(b *testing.B) {
			withProxy(b, func(addrs []string, srv []*Server, p *chaos.Proxy) {
				benchOps(b, k, addrs, srv, nil, 1, func() { fault(b, p) }, nil)
			})
		})
	}
}

// withProxy runs f with node 4 of 5 behind a fresh chaos proxy.
func withProxy(b *testing.B, f func(addrs []string, srv []*Server, p *chaos.Proxy)) {
	srv := nodes(b, 5)
	p, err := chaos.NewProxy(srv[4].Addr())
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	addrs := addrsOf(srv)
	addrs[4] = p.Addr()
	f(addrs, srv, p)
}

// Case 2: node 4's replies are delayed by 5 ms.
func BenchmarkC2SlowNode(b *testing.B) {
	faultCase(b, func(_ *testing.B, p *chaos.Proxy) { p.DelayReplies(slowReply) })
}

// Case 3a: node 4 refuses connections (the proxy stops listening and
// closes the open connections).
func BenchmarkC3RefusingNode(b *testing.B) {
	faultCase(b, func(b *testing.B, p *chaos.Proxy) {
		if err := p.Down(); err != nil {
			b.Fatal(err)
		}
	})
}

// Case 3b: node 4 accepts connections but never answers: the proxy drops
// every request (the node never sees them), connections stay open.
func BenchmarkC3BlackholedNode(b *testing.B) {
	faultCase(b, func(_ *testing.B, p *chaos.Proxy) { p.DropRequests(true) })
}

// Case 4: 4 goroutines run operations on 5 nodes; when half of the
// operations have started, node 4 dies. "process": its redis-server (an
// old spare, spareNode, one per call) gets SIGKILL (the kernel resets its
// connections). "host": its machine vanishes (the proxy in front of the
// pool's node 4 starts dropping every request: no reset, no reply; the
// node keeps its keys, counted as lost-node-keys). worst-ms is the slowest
// single operation of the run.
func BenchmarkC4NodeKilled(b *testing.B) {
	for _, mode := range []string{"process", "host"} {
		for _, k := range faultKinds {
			if mode == "host" && k == RedsyncDefault {
				// Every operation after the loss waits for go-redis's 5 s
				// read timeout (and its retries); case 3b measures that.
				continue
			}
			b.Run(mode+"/"+string(k), func(b *testing.B) {
				var (
					srv   []*Server
					addrs []string
					kill  func()
					lost  *Server // unreachable but alive: its keys stay
				)
				if mode == "process" {
					victim := spareNode(b)
					defer victim.Close()
					srv = append(slices.Clone(nodes(b, 4)), victim)
					addrs = addrsOf(srv)
					kill = func() { _ = victim.Kill() }
				} else {
					srv = nodes(b, 5)
					lost = srv[4]
					p, err := chaos.NewProxy(lost.Addr())
					if err != nil {
						b.Fatal(err)
					}
					defer p.Close()
					addrs = addrsOf(srv)
					addrs[4] = p.Addr()
					kill = func() { p.DropRequests(true) }
				}
				_, w := benchOps(b, k, addrs, srv, lost, killWorkers, nil, kill)
				b.ReportMetric(ms(w.op), "worst-ms")
				b.ReportMetric(ms(w.acq), "worst-acq-ms")
				b.ReportMetric(ms(w.rel), "worst-rel-ms")
			})
		}
	}
}

// Case 5: 16 goroutines, each with its own client (16 workers), contend for
// one key for a fixed 4 s (whatever b.N and -benchtime say). Each takes the
// lock with its library's own retry policy, holds it 1 ms, releases it, and
// starts again. Reported: acq/s; wait-p50-ms, wait-p99-ms, wait-max-ms (from
// the call to holding the lock, over acquisitions completed in the run);
// fairness = fewest / most acquisitions of one goroutine; attempts/acq;
// overlaps (two holders at once: must be 0); ns/op, B/op and allocs/op per
// acquisition.
//
// handoff-p50-ms and handoff-p99-ms are the time from a holder's call to
// release to the next holder's grant (its acquire call returning): how long
// the key stays free between two holders.
func BenchmarkC5Contention(b *testing.B) {
	for _, k := range []Kind{Ours, OursNoGuard, RedsyncTuned, RedsyncDefault} {
		b.Run(string(k), func(b *testing.B) {
			srv := nodes(b, 5)
			contend(b, k, srv, addrsOf(srv))
		})
	}
}

// contend runs case 5 for kind over the nodes at addrs (srv, or proxies in
// front of them).
func contend(b *testing.B, kind Kind, srv []*Server, addrs []string) {
	startClean(b, srv)
	waiters := make([]Waiter, lanesN)
	for g := range waiters {
		w, err := NewWaiter(kind, addrs)
		if err != nil {
			b.Fatal(err)
		}
		defer w.Close()
		waiters[g] = w
		// Warm up the connections on a key nobody contends for. On a
		// loaded machine a first dial or a release may outlast a per-node
		// timeout: a few failures are tolerated.
		for i, failed := 0, 0; i < 3; i++ {
			_, rel, err := w.Wait(context.Background(), lanes[g][0])
			if err == nil {
				err = rel()
			}
			if err != nil {
				if failed++; failed > 3 {
					b.Fatal(err)
				}
			}
		}
	}
	// The contended key is used once before the run, so that the run
	// measures hand-offs of a key in use. (With the amnesia guard on, a
	// key's first use needs one client to win every node; 16 clients
	// racing for a brand-new key 1 ms away made no acquisition in 4 s in
	// one run on a loaded machine: bench/results/run-20261202T032450Z.txt.)
	const key = "bench:contended"
	for failed := 0; ; failed++ {
		_, rel, err := waiters[0].Wait(context.Background(), key)
		if err == nil {
			err = rel()
		}
		if err == nil {
			break
		}
		if failed > 3 {
			b.Fatal(err)
		}
	}
	var (
		holders           atomic.Int32
		overlaps, relErrs atomic.Int64
		waitErrs, cutOff  atomic.Int64
		counts, attempts  = make([]int, lanesN), make([]int, lanesN)
		waits             = make([][]time.Duration, lanesN)
		wg                sync.WaitGroup
		before, after     runtime.MemStats
		ctx, cancel       = context.WithTimeout(context.Background(), contendFor)
		firstWaitErrOnce  sync.Once
		firstWaitErr      error
		// relStart is when the last holder called release (UnixNano, 0:
		// none yet); handoffs the gaps from there to the next grant.
		relStart  atomic.Int64
		handoffMu sync.Mutex
		handoffs  []time.Duration
	)
	defer cancel()
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	cpu0 := cpuTime()
	start := time.Now()
	for g := range lanesN {
		wg.Go(func() {
			for ctx.Err() == nil {
				t0 := time.Now()
				n, rel, err := waiters[g].Wait(ctx, key)
				if err != nil {
					if ctx.Err() != nil {
						cutOff.Add(1) // still waiting when the run ended
						return
					}
					waitErrs.Add(1)
					firstWaitErrOnce.Do(func() { firstWaitErr = err })
					continue
				}
				granted := time.Now()
				waits[g] = append(waits[g], granted.Sub(t0))
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				if r := relStart.Load(); r != 0 {
					handoffMu.Lock()
					handoffs = append(handoffs, granted.Sub(time.Unix(0, r)))
					handoffMu.Unlock()
				}
				time.Sleep(hold)
				holders.Add(-1)
				relStart.Store(time.Now().UnixNano())
				if err := rel(); err != nil {
					relErrs.Add(1)
				}
				counts[g]++
				attempts[g] += n
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&after)
	for _, w := range waiters {
		w.Close()
	}

	total, tries := 0, 0
	var all []time.Duration
	for g := range lanesN {
		total += counts[g]
		tries += attempts[g]
		all = append(all, waits[g]...)
	}
	if firstWaitErr != nil {
		b.Logf("%d waits failed before the end; first: %v", waitErrs.Load(), firstWaitErr)
	}
	if total == 0 {
		b.Fatalf("no acquisition in %v", elapsed)
	}
	per := float64(total)
	b.ReportMetric(float64(elapsed.Nanoseconds())/per, "ns/op")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/per, "allocs/op")
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/per, "B/op")
	b.ReportMetric(us(cpu)/per, "cpu-us/op")
	b.ReportMetric(per/elapsed.Seconds(), "acq/s")
	b.ReportMetric(ms(percentile(all, 50)), "wait-p50-ms")
	b.ReportMetric(ms(percentile(all, 99)), "wait-p99-ms")
	b.ReportMetric(ms(slices.Max(all)), "wait-max-ms")
	if len(handoffs) > 0 {
		b.ReportMetric(ms(percentile(handoffs, 50)), "handoff-p50-ms")
		b.ReportMetric(ms(percentile(handoffs, 99)), "handoff-p99-ms")
	}
	b.ReportMetric(float64(slices.Min(counts))/float64(slices.Max(counts)), "fairness")
	b.ReportMetric(float64(tries)/per, "attempts/acq")
	b.ReportMetric(float64(overlaps.Load()), "overlaps")
	b.ReportMetric(float64(relErrs.Load()+waitErrs.Load()), "fails")
	b.ReportMetric(float64(cutOff.Load()), "cut-off")
	checkStale(b, srv, nil)
}

// Case 6: 16 goroutines on distinct keys, 5 nodes. ns/op is wall time over
// operations, so ops/s = 1e9 / ns/op.
func BenchmarkC6Parallel(b *testing.B) {
	srv := nodes(b, 5)
	for _, k := range []Kind{Ours, OursNoFence, Floor, RedsyncTuned, RedsyncDefault} {
		b.Run(string(k), func(b *testing.B) {
			st, _ := benchOps(b, k, addrsOf(srv), srv, nil, lanesN, nil, nil)
			b.ReportMetric(float64(b.N)/st.elapsed.Seconds(), "ops/s")
		})
	}
}

// Case 7: one goroutine, N = 1, 3, 5, 7, 9 nodes: how the cost grows with N,
// fencing on and off, against the floor and the tuned redsync.
func BenchmarkC7Nodes(b *testing.B) {
	for _, n := range []int{1, 3, 5, 7, 9} {
		for _, k := range []Kind{Ours, OursNoFence, Floor, RedsyncTuned} {
			b.Run(fmt.Sprintf("N=%d/%s", n, k), func(b *testing.B) {
				srv := nodes(b, n)
				benchOps(b, k, addrsOf(srv), srv, nil, 1, nil, nil)
			})
		}
	}
}
