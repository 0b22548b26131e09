package bench

// Round trips as on a network: the nodes behind delay proxies that add a
// one-way delay to every byte in each direction, so that a round trip to a
// node costs what it would across a network. The proxies run in a child
// process (this test binary started again, see TestMain), so that the
// client's CPU figures (getrusage of this process) are the client's alone.
//
// The physical limit of a majority lock is one round trip per phase to the
// quorum-th fastest node: two for acquire + release. The variant "limit"
// (impls.go) measures it in the same run: two phases of PING to every
// node, each done at a majority.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/d3b93e30/redlock/chaos"
)

// delayProxyEnv, set in the environment of this test binary, makes it
// serve delay proxies instead of running tests: its value is a list of
// "target=oneway" (oneway a time.Duration) separated by commas. The child
// prints each proxy's address on a line of its own, in order, and serves
// until its standard input is closed.
const delayProxyEnv = "REDLOCK_BENCH_DELAY_PROXIES"

// serveDelayProxies is the child's side of startDelayProxies.
func serveDelayProxies(spec string) int {
	var proxies []*chaos.Proxy
	defer func() {
		for _, p := range proxies {
			p.Close()
		}
	}()
	for _, item := range strings.Split(spec, ",") {
		target, d, ok := strings.Cut(item, "=")
		oneWay, err := time.ParseDuration(d)
		if !ok || err != nil {
			fmt.Fprintf(os.Stderr, "%s: bad item %q\n", delayProxyEnv, item)
			return 2
		}
		p, err := chaos.NewProxy(target)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		p.DelayRequests(oneWay)
		p.DelayReplies(oneWay)
		proxies = append(proxies, p)
		fmt.Println(p.Addr())
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the parent closes it or dies
	return 0
}

// delayProxies is a child process serving one delay proxy per node.
type delayProxies struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	addrs []string // the proxies' addresses, in the order of the targets
}

// startDelayProxies starts a child process with a proxy in front of each
// of targets, adding oneWay[i] to each direction of target i.
func startDelayProxies(targets []string, oneWay []time.Duration) (*delayProxies, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	items := make([]string, len(targets))
	for i, t := range targets {
		items[i] = t + "=" + oneWay[i].String()
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), delayProxyEnv+"="+strings.Join(items, ","))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	dp := &delayProxies{cmd: cmd, stdin: stdin}
	sc := bufio.NewScanner(stdout)
	for range targets {
		if !sc.Scan() {
			dp.Close()
			return nil, errors.New("delay proxies: the child printed no address")
		}
		dp.addrs = append(dp.addrs, strings.TrimSpace(sc.Text()))
	}
	return dp, nil
}

// Close ends the child (closing its standard input) and waits for it.
func (dp *delayProxies) Close() {
	dp.stdin.Close()
	done := make(chan struct{})
	go func() {
		_ = dp.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = dp.cmd.Process.Kill()
		<-done
	}
}

// topology is the one-way delay added in front of each of 5 nodes.
type topology struct {
	name   string
	oneWay []time.Duration
}

var (
	halfMs = 500 * time.Microsecond
	// rttTopologies are the round-trip cases' topologies: all 5 nodes at
	// 0.5 ms one way (1 ms round trip), all at 2 ms, and 4 at 0.5 ms with
	// one 10 ms away.
	rttTopologies = []topology{
		{"5x0.5ms", []time.Duration{halfMs, halfMs, halfMs, halfMs, halfMs}},
		{"5x2ms", []time.Duration{2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond, 2 * time.Millisecond}},
		{"4x0.5ms+10ms", []time.Duration{halfMs, halfMs, halfMs, halfMs, 10 * time.Millisecond}},
	}
)

// nominalLimit is the physical limit of acquire + release on t: two round
// trips (2 × 2 one-way delays) to the quorum-th fastest node.
func (t topology) nominalLimit() time.Duration {
	d := slices.Clone(t.oneWay)
	slices.Sort(d)
	return 4 * d[len(d)/2]
}

// withTopology runs f with 5 nodes behind delay proxies as t says.
func withTopology(b *testing.B, t topology, f func(addrs []string, srv []*Server)) {
	srv := nodes(b, 5)
	dp, err := startDelayProxies(addrsOf(srv), t.oneWay)
	if err != nil {
		b.Fatal(err)
	}
	defer dp.Close()
	f(dp.addrs, srv)
}

// reusedRing is how many names each variant cycles through in the
// round-trip cases' default rows: a job locking the same few names again
// and again. The "-fresh" rows lock a new name every time, as case 1 does.
const reusedRing = 8

// rttVariant is one row of a round-trip case.
type rttVariant struct {
	name string
	kind Kind
	ring int
}

var rttVariants = []rttVariant{
	{"limit", Limit, reusedRing},
	{"ours", Ours, reusedRing},
	{"ours-noguard", OursNoGuard, reusedRing},
	{"redsync-tuned", RedsyncTuned, reusedRing},
	{"redsync-default", RedsyncDefault, reusedRing},
	{"ours-fresh", Ours, keyRing},
	{"ours-noguard-fresh", OursNoGuard, keyRing},
}

const (
	// rttFor is how long each round-trip case runs, whatever b.N says.
	rttFor = 8 * time.Second
	// rttBlock is how many operations of one variant run in a row.
	rttBlock = 10
)

// rttRow is what one variant of a round-trip case measured.
type rttRow struct {
	total, acq, rel []time.Duration
	cpu             time.Duration
	mallocs, bytes  uint64
	nodes           nodeStats
	fails           int
	firstErr        error
}

// BenchmarkRoundTrips: acquire + release, one goroutine, 5 nodes behind
// delay proxies (rttTopologies), every variant (rttVariants) over the same
// proxies in the same seconds: blocks of rttBlock operations of each
// variant in turn, the order rotating every round, for rttFor. The
// machine's drift (tens of percent from one second to the next when it is
// shared) then hits every variant alike, and the ratios to "limit" compare
// like with like. Each variant locks the names of a lane of its own.
//
// One benchmark line per topology; its metrics are named "variant:unit"
// (cmd/benchtable makes a row per variant): p50-us, p99-us, acq-p50-us,
// rel-p50-us, cpu-us/op (this process's CPU time over the variant's
// blocks), allocs/op, B/op (likewise, from runtime.MemStats),
// node-cmd-us/op, node-cpu-us/op, ops, fails, stale-keys. Work a variant
// leaves in the background (a straggler's reply, a delayed vouching) is
// counted in the block that follows, another variant's. limit-nominal-us
// is the topology's limit from its delays alone.
func BenchmarkRoundTrips(b *testing.B) {
	for _, t := range rttTopologies {
		b.Run(t.name, func(b *testing.B) {
			withTopology(b, t, func(addrs []string, srv []*Server) {
				roundTrips(b, t, addrs, srv)
			})
		})
	}
}

func roundTrips(b *testing.B, t topology, addrs []string, srv []*Server) {
	ctx := context.Background()
	startClean(b, srv)
	ims := make([]Impl, len(rttVariants))
	for i, v := range rttVariants {
		im, err := NewImpl(v.kind, addrs)
		if err != nil {
			b.Fatal(err)
		}
		defer im.Close()
		ims[i] = im
		// Warm-up, on the names the run will use; the first dials through
		// a proxy just started may outlast a per-node timeout on a loaded
		// machine, so a few failures are tolerated.
		for j, failed := 0, 0; j < 10; j++ {
			key := lanes[i][keyRing-1-j]
			if v.ring < keyRing {
				key = lanes[i][j%v.ring]
			}
			if _, _, err := im.Op(ctx, key); err != nil {
				if failed++; failed > 5 {
					b.Fatalf("%s warm-up: %v", v.name, err)
				}
			}
		}
		awaitIncarnations(b, im)
	}
	rows := make([]rttRow, len(rttVariants))
	next := make([]int, len(rttVariants)) // each variant's next name
	runtime.GC()
	b.ResetTimer()
	start := time.Now()
	for round := 0; round < 3 || time.Since(start) < rttFor; round++ {
		for j := range rttVariants {
			i := (j + round) % len(rttVariants)
			v, im, row := rttVariants[i], ims[i], &rows[i]
			ns0, err := readNodeStats(ctx, srv)
			if err != nil {
				b.Fatal(err)
			}
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			cpu0 := cpuTime()
			for range rttBlock {
				key := lanes[i][next[i]%v.ring]
				next[i]++
				t0 := time.Now()
				acq, rel, err := im.Op(ctx, key)
				row.total = append(row.total, time.Since(t0))
				row.acq, row.rel = append(row.acq, acq), append(row.rel, rel)
				if err != nil {
					row.fails++
					if row.firstErr == nil {
						row.firstErr = err
					}
				}
			}
			row.cpu += cpuTime() - cpu0
			runtime.ReadMemStats(&m1)
			row.mallocs += m1.Mallocs - m0.Mallocs
			row.bytes += m1.TotalAlloc - m0.TotalAlloc
			ns1, err := readNodeStats(ctx, srv)
			if err != nil {
				b.Fatal(err)
			}
			row.nodes = row.nodes.add(ns1.sub(ns0), v.kind)
		}
	}
	b.StopTimer()
	for _, im := range ims {
		im.Close()
	}
	staleBy := map[string]int{}
	for _, keys := range scanKeys(b, srv) {
		for _, k := range keys {
			staleBy[k[:len("bench:00")]]++
		}
	}
	flush(b, srv)
	b.ReportMetric(us(t.nominalLimit()), "limit-nominal-us")
	for i, v := range rttVariants {
		row := &rows[i]
		n := float64(len(row.total))
		if row.fails > 0 {
			b.Logf("%s: %d of %.0f operations failed; first error: %v", v.name, row.fails, n, row.firstErr)
		}
		m := func(x float64, unit string) { b.ReportMetric(x, v.name+":"+unit) }
		m(n, "ops")
		m(us(percentile(row.total, 50)), "p50-us")
		m(us(percentile(row.total, 99)), "p99-us")
		m(us(percentile(row.acq, 50)), "acq-p50-us")
		m(us(percentile(row.rel, 50)), "rel-p50-us")
		m(us(row.cpu)/n, "cpu-us/op")
		m(float64(row.mallocs)/n, "allocs/op")
		m(float64(row.bytes)/n, "B/op")
		m(float64(row.nodes.cmdUsec["own"])/n, "node-cmd-us/op")
		m(float64(row.nodes.cpuUsec)/n, "node-cpu-us/op")
		m(float64(row.fails), "fails")
		m(float64(staleBy[fmt.Sprintf("bench:%02d", i)]), "stale-keys")
	}
}

// BenchmarkRoundTripContention is case 5 (16 clients, one key, 1 ms hold)
// with the nodes behind delay proxies, on the topologies where every node
// is the same distance away. rtt-ms is the measured round trip to the
// quorum-th fastest node (p50 of one "limit" phase), for the hand-off
// target: handoff-p50-ms ≤ 2 round trips + 1 ms.
func BenchmarkRoundTripContention(b *testing.B) {
	for _, t := range rttTopologies[:2] {
		for _, k := range []Kind{Ours, OursNoGuard, RedsyncTuned, RedsyncDefault} {
			b.Run(t.name+"/"+string(k), func(b *testing.B) {
				withTopology(b, t, func(addrs []string, srv []*Server) {
					rtt := quorumRTT(b, addrs)
					contend(b, k, srv, addrs)
					b.ReportMetric(ms(rtt), "rtt-ms")
				})
			})
		}
	}
}

// quorumRTT measures the round trip to the quorum-th fastest node of addrs:
// the p50 of 50 majority PING phases.
func quorumRTT(b *testing.B, addrs []string) time.Duration {
	im, err := NewImpl(Limit, addrs)
	if err != nil {
		b.Fatal(err)
	}
	defer im.Close()
	var d []time.Duration
	for range 50 {
		acq, _, err := im.Op(context.Background(), "")
		if err != nil {
			b.Fatal(err)
		}
		d = append(d, acq)
	}
	return percentile(d, 50)
}
