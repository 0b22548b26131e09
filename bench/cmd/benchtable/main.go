// Command benchtable reads the output of `go test -bench` in bench/ on
// stdin and prints, in Markdown, one table per case, the ratios between
// libraries computed within that run, and each target marked met or missed
// (the targets and the stricter stretch targets counted apart). Lines it
// does not recognise (headers, logs) are ignored, except
// "# " lines (the run's metadata written by run.sh), which are copied.
//
//	go run ./cmd/benchtable -node-timeout 100ms < results/run.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// row is one benchmark result line.
type row struct {
	name string // without "Benchmark" and the -GOMAXPROCS suffix
	n    int64
	m    map[string]float64 // unit -> value
}

var lineRE = regexp.MustCompile(`^Benchmark(\S+?)(-\d+)?\s+(\d+)\s+(.*)$`)

func parse(r io.Reader, meta io.Writer) ([]row, error) {
	var rows []row
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# ") {
			fmt.Fprintln(meta, line[2:]+"  ")
			continue
		}
		g := lineRE.FindStringSubmatch(line)
		if g == nil {
			continue
		}
		n, _ := strconv.ParseInt(g[3], 10, 64)
		f := strings.Fields(g[4])
		rw := row{name: g[1], n: n, m: map[string]float64{}}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			rw.m[f[i+1]] = v
		}
		rows = append(rows, expand(rw)...)
	}
	return rows, sc.Err()
}

// variantOrder is the order of the rows expand makes (others after them,
// by name).
var variantOrder = []string{"limit", "ours", "ours-noguard", "ours-fresh", "ours-noguard-fresh", "redsync-tuned", "redsync-default"}

// expand turns a benchmark line whose metrics are named "variant:unit" (the
// round-trip cases measure every variant in one benchmark, interleaved)
// into one row per variant, named "<benchmark>/<variant>", with that
// variant's metrics, the line's plain metrics, and as runs its "ops".
func expand(rw row) []row {
	var out []row
	byVariant := map[string]int{}
	plain := map[string]float64{}
	for unit, v := range rw.m {
		variant, u, ok := strings.Cut(unit, ":")
		if !ok {
			plain[unit] = v
			continue
		}
		i, seen := byVariant[variant]
		if !seen {
			i = len(out)
			byVariant[variant] = i
			out = append(out, row{name: rw.name + "/" + variant, m: map[string]float64{}})
		}
		out[i].m[u] = v
	}
	if len(out) == 0 {
		return []row{rw}
	}
	rank := func(r row) int {
		_, v, _ := strings.Cut(strings.TrimPrefix(r.name, rw.name), "/")
		if i := slices.Index(variantOrder, v); i >= 0 {
			return i
		}
		return len(variantOrder)
	}
	slices.SortStableFunc(out, func(a, b row) int {
		if c := rank(a) - rank(b); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	for i := range out {
		for u, v := range plain {
			switch u {
			case "ns/op", "B/op", "allocs/op": // the whole benchmark's
			default:
				out[i].m[u] = v
			}
		}
		out[i].n = int64(out[i].m["ops"])
		delete(out[i].m, "ops")
	}
	return out
}

// columns in display order: unit, header.
var columns = [][2]string{
	{"ns/op", "ns/op"},
	{"p50-us", "p50 µs"},
	{"p99-us", "p99 µs"},
	{"acq-p50-us", "acquire p50 µs"},
	{"rel-p50-us", "release p50 µs"},
	{"ops/s", "ops/s"},
	{"worst-ms", "worst op ms"},
	{"worst-acq-ms", "worst acquire ms"},
	{"worst-rel-ms", "worst release ms"},
	{"acq/s", "acq/s"},
	{"wait-p50-ms", "wait p50 ms"},
	{"wait-p99-ms", "wait p99 ms"},
	{"wait-max-ms", "wait max ms"},
	{"fairness", "fairness"},
	{"attempts/acq", "attempts/acq"},
	{"overlaps", "overlaps"},
	{"cut-off", "waiting at end"},
	{"first-try-%", "first try %"},
	{"attempts/burst", "attempts/burst"},
	{"max-attempts", "most attempts of one call"},
	{"timedout/burst", "nodes reported timed out/burst"},
	{"burst-ms", "burst p50 ms"},
	{"heap-growth-KB", "heap growth KB"},
	{"heap-B/attempt", "heap B/attempt"},
	{"attempts", "attempts"},
	{"handoff-p50-ms", "hand-off p50 ms"},
	{"handoff-p99-ms", "hand-off p99 ms"},
	{"rtt-ms", "round trip ms"},
	{"limit-nominal-us", "limit from the delays µs"},
	{"cmds/op", "node cmds/op (incl. in scripts)"},
	{"cpu-us/op", "client CPU µs/op"},
	{"node-cmd-us/op", "node cmd µs/op"},
	{"node-cpu-us/op", "node CPU µs/op"},
	{"stall-ms", "process stall ms"},
	{"allocs/op", "allocs/op"},
	{"B/op", "B/op"},
	{"fails", "fails"},
	{"rel-fails", "release fails"},
	{"stale-keys", "stale keys"},
	{"lost-node-keys", "keys on lost node"},
}

func num(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	switch {
	case a == 0:
		return "0"
	case a >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

func tables(w io.Writer, rows []row) {
	var cases []string
	byCase := map[string][]row{}
	for _, r := range rows {
		c, _, _ := strings.Cut(r.name, "/")
		if _, ok := byCase[c]; !ok {
			cases = append(cases, c)
		}
		byCase[c] = append(byCase[c], r)
	}
	for _, c := range cases {
		rs := byCase[c]
		var cols [][2]string
		for _, col := range columns {
			for _, r := range rs {
				if _, ok := r.m[col[0]]; ok {
					cols = append(cols, col)
					break
				}
			}
		}
		fmt.Fprintf(w, "\n### %s\n\n| variant | runs |", c)
		for _, col := range cols {
			fmt.Fprintf(w, " %s |", col[1])
		}
		fmt.Fprint(w, "\n| --- | ---: |")
		for range cols {
			fmt.Fprint(w, " ---: |")
		}
		fmt.Fprintln(w)
		for _, r := range rs {
			_, v, _ := strings.Cut(r.name, "/")
			fmt.Fprintf(w, "| %s | %d |", v, r.n)
			for _, col := range cols {
				if x, ok := r.m[col[0]]; ok {
					fmt.Fprintf(w, " %s |", num(x))
				} else {
					fmt.Fprint(w, " |")
				}
			}
			fmt.Fprintln(w)
		}
	}
}

// checker looks results up and prints ratios and verdicts.
type checker struct {
	w      io.Writer
	rows   map[string]row
	missed int
	met    int
	absent int
}

func (c *checker) get(name, unit string) (float64, bool) {
	r, ok := c.rows[name]
	if !ok {
		return 0, false
	}
	v, ok := r.m[unit]
	return v, ok
}

// ratio prints a/b for two results and returns it (NaN-free: ok false when
// either is missing).
func (c *checker) ratio(what, an, au, bn, bu string) (float64, bool) {
	a, ok1 := c.get(an, au)
	b, ok2 := c.get(bn, bu)
	if !ok1 || !ok2 || b == 0 {
		fmt.Fprintf(c.w, "| %s | n/a | |\n", what)
		return 0, false
	}
	r := a / b
	fmt.Fprintf(c.w, "| %s | %s / %s | %.2f |\n", what, num(a), num(b), r)
	return r, true
}

// skip records a target whose figures are not in this run.
func (c *checker) skip(target string) {
	c.absent++
	fmt.Fprintf(c.w, "| %s | not in this run | n/a |\n", target)
}

func (c *checker) verdict(target string, ok bool, figure string) {
	v := "**missed**"
	if ok {
		v = "met"
		c.met++
	} else {
		c.missed++
	}
	fmt.Fprintf(c.w, "| %s | %s | %s |\n", target, figure, v)
}

func main() {
	nodeTimeout := flag.Duration("node-timeout", 100*time.Millisecond, "the per-node timeout the benchmarks used")
	flag.Parse()
	rows, err := parse(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark lines on stdin")
		os.Exit(1)
	}
	w := os.Stdout
	tables(w, rows)

	c := &checker{w: w, rows: map[string]row{}}
	for _, r := range rows {
		c.rows[r.name] = r
	}
	const c1, c2, c3r, c3b, c5 = "C1Uncontended/", "C2SlowNode/", "C3RefusingNode/", "C3BlackholedNode/", "C5Contention/"

	fmt.Fprint(w, "\n### Ratios (this run)\n\n| ratio | figures | value |\n| --- | --- | ---: |\n")
	type rr struct {
		what   string
		an, au string
		bn, bu string
	}
	ratios := []rr{
		{"C1 p50: ours / floor", c1 + "ours", "p50-us", c1 + "floor", "p50-us"},
		{"C1 p50: ours-nofence / floor", c1 + "ours-nofence", "p50-us", c1 + "floor", "p50-us"},
		{"C1 p50: ours / redsync-tuned", c1 + "ours", "p50-us", c1 + "redsync-tuned", "p50-us"},
		{"C1 p50: ours-nofence / redsync-tuned", c1 + "ours-nofence", "p50-us", c1 + "redsync-tuned", "p50-us"},
		{"C1 p50: ours / redsync-default", c1 + "ours", "p50-us", c1 + "redsync-default", "p50-us"},
		{"C1 p50: redsync-tuned / floor", c1 + "redsync-tuned", "p50-us", c1 + "floor", "p50-us"},
		{"C1 p50: ours / redislock-1node", c1 + "ours", "p50-us", c1 + "redislock-1node", "p50-us"},
		{"C1 p50: ours / ours-noguard (the amnesia guard's cost)", c1 + "ours", "p50-us", c1 + "ours-noguard", "p50-us"},
		{"C1 ns/op: ours / ours-noguard", c1 + "ours", "ns/op", c1 + "ours-noguard", "ns/op"},
		{"C1 p50: ours-semaphore / ours (a permit vs the lock)", c1 + "ours-semaphore", "p50-us", c1 + "ours", "p50-us"},
		{"C2 p50: ours slow node / ours no fault (control)", c2 + "ours", "p50-us", c2 + "ours-nofault", "p50-us"},
		{"C2 acquire p50: ours slow node / ours no fault (control)", c2 + "ours", "acq-p50-us", c2 + "ours-nofault", "acq-p50-us"},
		{"C2 p50: ours slow node / ours C1", c2 + "ours", "p50-us", c1 + "ours", "p50-us"},
		{"C2 p50: ours / redsync-default", c2 + "ours", "p50-us", c2 + "redsync-default", "p50-us"},
		{"C2 p50: ours / redsync-tuned", c2 + "ours", "p50-us", c2 + "redsync-tuned", "p50-us"},
		{"C3 p50: ours refusing node / ours no fault (control)", c3r + "ours", "p50-us", c3r + "ours-nofault", "p50-us"},
		{"C3 acquire p50: ours refusing node / ours no fault (control)", c3r + "ours", "acq-p50-us", c3r + "ours-nofault", "acq-p50-us"},
		{"C3 p50: ours refusing node / ours C1", c3r + "ours", "p50-us", c1 + "ours", "p50-us"},
		{"C3 p50: ours refusing / redsync-default", c3r + "ours", "p50-us", c3r + "redsync-default", "p50-us"},
		{"C3 p50: ours blackholed node / ours no fault (control)", c3b + "ours", "p50-us", c3b + "ours-nofault", "p50-us"},
		{"C3 acquire p50: ours blackholed node / ours no fault (control)", c3b + "ours", "acq-p50-us", c3b + "ours-nofault", "acq-p50-us"},
		{"C3 p50: ours blackholed node / ours C1", c3b + "ours", "p50-us", c1 + "ours", "p50-us"},
		{"C3 p50: ours blackholed / redsync-default", c3b + "ours", "p50-us", c3b + "redsync-default", "p50-us"},
		{"C3 p50: ours blackholed / redsync-tuned", c3b + "ours", "p50-us", c3b + "redsync-tuned", "p50-us"},
		{"C5 acq/s: ours / redsync-tuned", c5 + "ours", "acq/s", c5 + "redsync-tuned", "acq/s"},
		{"C5 acq/s: ours / redsync-default", c5 + "ours", "acq/s", c5 + "redsync-default", "acq/s"},
		{"C5 wait p99: ours / redsync-tuned", c5 + "ours", "wait-p99-ms", c5 + "redsync-tuned", "wait-p99-ms"},
		{"C5 wait p99: ours / redsync-default", c5 + "ours", "wait-p99-ms", c5 + "redsync-default", "wait-p99-ms"},
		{"C6 ops/s: ours / floor", "C6Parallel/ours", "ops/s", "C6Parallel/floor", "ops/s"},
		{"C6 ops/s: ours / redsync-tuned", "C6Parallel/ours", "ops/s", "C6Parallel/redsync-tuned", "ops/s"},
		{"C6 ops/s: ours / redsync-default", "C6Parallel/ours", "ops/s", "C6Parallel/redsync-default", "ops/s"},
		{"C7 p50: ours N=9 / ours N=1", "C7Nodes/N=9/ours", "p50-us", "C7Nodes/N=1/ours", "p50-us"},
		{"C7 p50: floor N=9 / floor N=1", "C7Nodes/N=9/floor", "p50-us", "C7Nodes/N=1/floor", "p50-us"},
		{"C7 p50: ours / ours-nofence, N=5", "C7Nodes/N=5/ours", "p50-us", "C7Nodes/N=5/ours-nofence", "p50-us"},
	}
	for _, n := range []int{1, 3, 5, 7, 9} {
		ratios = append(ratios, rr{fmt.Sprintf("C7 p50: ours / floor, N=%d", n),
			fmt.Sprintf("C7Nodes/N=%d/ours", n), "p50-us", fmt.Sprintf("C7Nodes/N=%d/floor", n), "p50-us"})
	}
	for _, t := range rttTopologies {
		p := "RoundTrips/" + t.name + "/"
		for _, v := range variantOrder[1:] {
			ratios = append(ratios, rr{"Round trips, " + t.name + ", p50: " + v + " / limit", p + v, "p50-us", p + "limit", "p50-us"})
		}
		ratios = append(ratios, rr{"Round trips, " + t.name + ": measured limit / limit from the delays", p + "limit", "p50-us", p + "limit", "limit-nominal-us"})
	}
	for _, t := range rttTopologies[:2] {
		p := "RoundTripContention/" + t.name + "/"
		ratios = append(ratios,
			rr{"Contention, " + t.name + ", acq/s: ours / redsync-tuned", p + "ours", "acq/s", p + "redsync-tuned", "acq/s"},
			rr{"Contention, " + t.name + ", acq/s: ours / redsync-default", p + "ours", "acq/s", p + "redsync-default", "acq/s"})
	}
	for _, r := range ratios {
		c.ratio(r.what, r.an, r.au, r.bn, r.bu)
	}

	var staleOthers []string
	for _, r := range rows {
		if v := r.m["stale-keys"]; v > 0 && !isOurs(r.name) {
			staleOthers = append(staleOthers, fmt.Sprintf("%s: %s", r.name, num(v)))
		}
	}
	targets(c, rows, *nodeTimeout)
	if len(staleOthers) > 0 {
		slices.Sort(staleOthers)
		fmt.Fprintf(w, "\nStale keys left by other libraries: %s.\n", strings.Join(staleOthers, "; "))
	}
}

// isOurs reports whether a row is one of this module's configurations.
func isOurs(name string) bool {
	_, v, _ := strings.Cut(name, "/")
	return strings.Contains("/"+v, "/ours")
}

// summary prints the counts of the targets checked since the last summary
// and resets them.
func (c *checker) summary(which string) {
	fmt.Fprintf(c.w, "\n%d %s met, %d missed", c.met, which, c.missed)
	if c.absent > 0 {
		fmt.Fprintf(c.w, ", %d not in this run", c.absent)
	}
	fmt.Fprintln(c.w, ".")
	c.met, c.missed, c.absent = 0, 0, 0
}

// ratioTarget checks a / b against ok, or records the target as absent.
func (c *checker) ratioTarget(target, an, au, bn, bu string, ok func(float64) bool) {
	a, ok1 := c.get(an, au)
	b, ok2 := c.get(bn, bu)
	if !ok1 || !ok2 || b == 0 {
		c.skip(target)
		return
	}
	c.verdict(target, ok(a/b), fmt.Sprintf("%s / %s = %.2f", num(a), num(b), a/b))
}

// valueTarget checks one figure against ok, or records it as absent.
func (c *checker) valueTarget(target, name, unit, suffix string, ok func(float64) bool) {
	x, found := c.get(name, unit)
	if !found {
		c.skip(target)
		return
	}
	c.verdict(target, ok(x), num(x)+suffix)
}

// rttTopologies are the round-trip cases' topologies, as the benchmarks
// name them, with what each one is.
var rttTopologies = []struct{ name, what string }{
	{"5x0.5ms", "5 nodes 0.5 ms away (one way)"},
	{"5x2ms", "5 nodes 2 ms away"},
	{"4x0.5ms+10ms", "4 nodes 0.5 ms away and one 10 ms away"},
}

// targets prints the performance targets, one list, each named by what it
// measures, with their count.
func targets(c *checker, rows []row, nodeTimeout time.Duration) {
	const c1, c5, rt, rc = "C1Uncontended/", "C5Contention/", "RoundTrips/", "RoundTripContention/"
	le := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	ge := func(x float64) func(float64) bool { return func(v float64) bool { return v >= x } }
	fmt.Fprint(c.w, "\n### Targets (ours = default settings: fencing and the amnesia guard on)\n\n| target | figure | verdict |\n| --- | --- | --- |\n")

	// Round trips as on a network.
	for _, t := range rttTopologies {
		p := rt + t.name + "/"
		c.ratioTarget("Acquire + release, "+t.what+", names reused, p50: ours ≤ 1.1 × the limit (2 round trips to the 3rd fastest node)", p+"ours", "p50-us", p+"limit", "p50-us", le(1.1))
		if t.name != "4x0.5ms+10ms" {
			c.ratioTarget("Acquire + release, "+t.what+", p50: ours ≤ 1.0 × redsync-tuned", p+"ours", "p50-us", p+"redsync-tuned", "p50-us", le(1.0))
			c.ratioTarget("Acquire + release, "+t.what+", p50: ours ≤ 1.0 × redsync-default", p+"ours", "p50-us", p+"redsync-default", "p50-us", le(1.0))
		}
		c.ratioTarget("Acquire + release, "+t.what+", names reused, p50: amnesia guard on ≤ 1.05 × off", p+"ours", "p50-us", p+"ours-noguard", "p50-us", le(1.05))
		c.ratioTarget("Acquire + release, "+t.what+", a new name each time, p50: amnesia guard on ≤ 1.05 × off", p+"ours-fresh", "p50-us", p+"ours-noguard-fresh", "p50-us", le(1.05))
	}

	// What a client pays.
	c.ratioTarget("Client CPU per acquire + release, loopback (5 nodes): ours ≤ 1.0 × redsync-tuned", c1+"ours", "cpu-us/op", c1+"redsync-tuned", "cpu-us/op", le(1.0))
	c.ratioTarget("Client CPU per acquire + release, 5 nodes 0.5 ms away: ours ≤ 1.0 × redsync-tuned", rt+"5x0.5ms/ours", "cpu-us/op", rt+"5x0.5ms/redsync-tuned", "cpu-us/op", le(1.0))
	c.ratioTarget("Allocations per acquire + release, loopback: ours ≤ 1.5 × plain go-redis (the floor)", c1+"ours", "allocs/op", c1+"floor", "allocs/op", le(1.5))

	// Loopback latency.
	c.ratioTarget("Acquire + release on loopback (5 nodes sharing the client's 2 cores), p50: ours ≤ 1.0 × redsync-tuned", c1+"ours", "p50-us", c1+"redsync-tuned", "p50-us", le(1.0))
	c.ratioTarget("Acquire + release on loopback, p50: ours ≤ 1.15 × the floor", c1+"ours", "p50-us", c1+"floor", "p50-us", le(1.15))
	c.ratioTarget("Acquire + release on loopback, fencing off, p50: ≤ 1.05 × the floor", c1+"ours-nofence", "p50-us", c1+"floor", "p50-us", le(1.05))
	c.ratioTarget("Acquire + release on loopback, a new name each time, p50: amnesia guard on ≤ 1.05 × off", c1+"ours", "p50-us", c1+"ours-noguard", "p50-us", le(1.05))
	c.ratioTarget("Acquire + release on loopback, p50: a semaphore permit (of 3) ≤ 1.2 × the lock", c1+"ours-semaphore", "p50-us", c1+"ours", "p50-us", le(1.2))
	c.ratioTarget("Acquire + release, a multi-key lock of 4 keys, p50: ≤ 1.2 × one key's (Acquire), interleaved", "MultiLock/interleaved", "multi4-p50-us", "MultiLock/interleaved", "one-p50-us", le(1.2))

	// Faults.
	for _, f := range []struct{ what, name string }{{"slow (5 ms)", "C2SlowNode/"}, {"refusing", "C3RefusingNode/"}, {"blackholed", "C3BlackholedNode/"}} {
		c.ratioTarget("Acquire + release with one "+f.what+" node, p50: ≤ 1.2 × the same without the fault (control)", f.name+"ours", "p50-us", f.name+"ours-nofault", "p50-us", le(1.2))
		c.valueTarget("Keys left with one "+f.what+" node once the Client is closed: 0", f.name+"ours", "stale-keys", "", le(0))
	}
	limit := float64(nodeTimeout+time.Millisecond) / float64(time.Millisecond)
	for _, mode := range []string{"process", "host"} {
		c.valueTarget(fmt.Sprintf("Node killed mid-run (%s): worst operation ≤ the per-node timeout (%v) + 1 ms", mode, nodeTimeout), "C4NodeKilled/"+mode+"/ours", "worst-ms", " ms", le(limit))
	}

	// Hand-off under contention.
	for _, t := range rttTopologies[:2] {
		p := rc + t.name + "/ours"
		rtt, ok1 := c.get(p, "rtt-ms")
		h, ok2 := c.get(p, "handoff-p50-ms")
		what := "Hand-off under contention (16 clients, one key), " + t.what + ": release start to next grant p50 ≤ 2 round trips + 1 ms"
		if ok1 && ok2 {
			c.verdict(what, h <= 2*rtt+1, fmt.Sprintf("%s ms (round trip %s ms: bound %s ms)", num(h), num(rtt), num(2*rtt+1)))
		} else {
			c.skip(what)
		}
		c.valueTarget("Contention, "+t.what+": fairness (fewest / most acquisitions of one client) ≥ 0.95", p, "fairness", "", ge(0.95))
		c.valueTarget("Contention, "+t.what+": attempts per acquisition ≤ 1.1 (one waiter woken per release)", p, "attempts/acq", "", le(1.1))
		c.ratioTarget("Contention, "+t.what+": acquisitions/s ≥ 1.0 × redsync-tuned (1 ms hold)", p, "acq/s", rc+t.name+"/redsync-tuned", "acq/s", ge(1.0))
	}
	c.ratioTarget("Contention on loopback: acquisitions/s ≥ 1.0 × redsync-tuned (1 ms hold)", c5+"ours", "acq/s", c5+"redsync-tuned", "acq/s", ge(1.0))
	c.ratioTarget("Contention on loopback: wait p99 ≤ 0.2 × redsync-tuned", c5+"ours", "wait-p99-ms", c5+"redsync-tuned", "wait-p99-ms", le(0.2))
	c.valueTarget("Contention on loopback: fairness ≥ 0.95", c5+"ours", "fairness", "", ge(0.95))
	c.valueTarget("Contention on loopback: attempts per acquisition ≤ 1.1 (one waiter woken per release)", c5+"ours", "attempts/acq", "", le(1.1))
	overlaps, found := 0.0, false
	for _, r := range rows {
		if v, ok := r.m["overlaps"]; ok && isOurs(r.name) {
			overlaps += v
			found = true
		}
	}
	if found {
		c.verdict("Contention: two holders at once: 0", overlaps == 0, num(overlaps))
	} else {
		c.skip("Contention: two holders at once: 0")
	}

	// Bursts, memory, keys left.
	const burst = "Burst/ttl=2s/ours"
	c.valueTarget("Burst (200 at once, 2 s TTL, defaults): ≥ 99 % succeed on the first attempt", burst, "first-try-%", " %", ge(99))
	c.valueTarget("Burst: no healthy node reported timed out", burst, "timedout/burst", " per burst", le(0))
	c.valueTarget("One Acquire failing 3,500 times: heap grows ≤ 5 KB", "AcquireMemory/ours", "heap-growth-KB", " KB", le(5))
	var staleOurs []string
	for _, r := range rows {
		if v := r.m["stale-keys"]; v > 0 && isOurs(r.name) {
			staleOurs = append(staleOurs, fmt.Sprintf("%s: %s", r.name, num(v)))
		}
	}
	fig := "0 in every case"
	if len(staleOurs) > 0 {
		fig = strings.Join(staleOurs, "; ")
	}
	c.verdict("Keys left by ours after every case: 0", len(staleOurs) == 0, fig)
	c.summary("targets")
}
