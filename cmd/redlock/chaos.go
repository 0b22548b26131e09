package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/internal/mdsection"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// quietLogger drops go-redis's internal log lines.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// errFlagReported marks a flag error the flag package already printed.
var errFlagReported = errors.New("flag error already reported")

// exitUsage is the status for bad usage (EX_USAGE from sysexits.h).
const exitUsage = 64

// exitMismatch is the status of `redlock chaos` when an observed verdict
// differs from the expected one, or the harness failed.
const exitMismatch = 1

const chaosHelp = `Usage: redlock chaos [flags]

Runs failure-mode scenarios against a Redlock cluster and prints, for each,
how many locks were taken, in how many trials it was not safe and what that
bounds the rate of such trials to at 95 % confidence (0 in 300 trials: at
most 1.0 %), how many stale writes a plain and a fenced resource accepted,
and the expected and observed verdicts, with a legend; the output fits 80
columns. -v adds each trial's progress, the overlaps, whether fencing tokens
rose in holder order, the acquire latency and each scenario's reason;
--json and --svg give every detail; --doc rewrites a verdict table in a
Markdown page.
Exits 1 if any observed verdict differs from the expected one, or if every
scenario was skipped.

With --mutants (in a redlock built with -tags redlock_mutants) it runs the
harness against deliberately broken builds of the lock and of the read/write
lock instead (a quorum of one, no owner check on release, a reader granted
beside a writer, ...) and prints which scenarios caught each one; it exits 1
if a mutant was not caught. --mutant NAME runs only that one.

By default it runs every scenario of the catalogue on 5 in-process nodes (no
set-up); the semaphore, multi-key and read/write lock (rw-) scenarios run
when --scenario names them. --list lists them all.

Examples:
  redlock chaos
  redlock chaos --scenario client-pause --scenario amnesia-unguarded --svg out/
  redlock chaos --nodes 4 --scenario clock-jump --trials 1
  redlock chaos --mutants
  redlock chaos --mutants --mutant rw-reader-ignores-writer
  redlock chaos --scenario contention-16 --time-scale 3
  redlock chaos --backend redis-server --trials 3 --seed 42 --json
  redlock chaos --backend redis-server --fenced redis \
    --scenario clock-back-amnesia
  redlock chaos --trials 300 --parallel 6 --time-scale 2 --doc docs/safety.md

Flags:
`

// chaosFlags are the parsed flags of the chaos subcommand.
type chaosFlags struct {
	backend     string
	nodes       int
	scenarios   []string
	trials      int
	seed        uint64
	jsonOut     bool
	svgDir      string
	list        bool
	redisBinary string
	quiet       bool
	verbose     bool
	mutants     bool
	mutantNames []string // --mutant: run only these
	timeScale   float64
	clocks      string
	fenced      string
	parallel    int
	doc         string
	args        []string // as given, for the command line --doc records
}

// maxParallel is the largest --parallel: one cluster per scenario of the
// catalogue is already more than a 2-core machine can keep on time.
const maxParallel = 32

// maxTimeScale is the largest --time-scale: a 100 times slower machine is
// not one the harness can say anything about.
const maxTimeScale = 100

// parseChaosFlags parses the flags; --help prints the help on stdout, a bad
// flag prints the error and the help on stderr.
func parseChaosFlags(args []string, stdout, stderr io.Writer) (chaosFlags, error) {
	var f chaosFlags
	fs := flag.NewFlagSet("redlock chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), chaosHelp)
		printDefaults(fs)
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" || a == "--h" {
			fs.SetOutput(stdout)
		}
	}
	fs.StringVar(&f.backend, "backend", string(chaos.InProcess), "node backend: inprocess (miniredis, no set-up) or redis-server (real processes; needs redis-server on PATH)")
	fs.IntVar(&f.nodes, "nodes", chaos.DefaultNodes, "number of nodes N (at least 3 for most scenarios)")
	fs.Func("scenario", "run only this scenario (repeatable; default: the catalogue's; see --list)", func(s string) error {
		if _, ok := chaos.Find(s); !ok {
			return fmt.Errorf("unknown scenario %q (see --list)", s)
		}
		f.scenarios = append(f.scenarios, s)
		return nil
	})
	fs.IntVar(&f.trials, "trials", 2, "trials per scenario")
	fs.Uint64Var(&f.seed, "seed", 0, "seed for fault schedules (default: from the clock; printed)")
	fs.BoolVar(&f.jsonOut, "json", false, "print machine-readable results as JSON instead of the table")
	fs.StringVar(&f.svgDir, "svg", "", "write one timeline picture per scenario into this directory")
	fs.BoolVar(&f.list, "list", false, "list every scenario --scenario accepts and exit; those a run without --scenario leaves out say so")
	fs.StringVar(&f.redisBinary, "redis-server", "", "path to redis-server for --backend redis-server (default: PATH)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines")
	fs.BoolVar(&f.verbose, "v", false, "verbose: each trial's progress, and a wide table with trials, backend, latency and each scenario's reason")
	fs.BoolVar(&f.mutants, "mutants", false, "run the mutant catalogue (deliberately broken locks) against their scenarios instead")
	fs.Func("mutant", "with --mutants, run only this mutant (repeatable; default: every one)", func(name string) error {
		if !slices.ContainsFunc(chaos.Mutants(), func(m chaos.Mutant) bool { return m.Name == name }) {
			return fmt.Errorf("unknown mutant %q", name)
		}
		f.mutantNames = append(f.mutantNames, name)
		return nil
	})
	fs.StringVar(&f.clocks, "clocks", "auto", "how redis-server nodes' clocks move: real (a preloaded clock shim built with the C compiler moves each server's own clock), emulated (TTLs are shortened), or auto (real where a C compiler is found)")
	fs.StringVar(&f.fenced, "fenced", "register", "the fenced resource: register (fencing.Register in this process; guard is its old name) or redis (fencing.SetIfNewer on a redis-server of its own)")
	fs.IntVar(&f.parallel, "parallel", 1, "run up to this many scenarios at once, each on a cluster of its own (the trials of one scenario stay in order; the seeds do not depend on it)")
	fs.StringVar(&f.doc, "doc", "", "after the run, rewrite the verdict table between <!-- verdicts:begin BACKEND --> and <!-- verdicts:end BACKEND --> in this Markdown file")
	fs.Float64Var(&f.timeScale, "time-scale", 1, "stretch every scenario's durations (TTLs, timeouts, holds, faults, trial length) by this factor, from 1 to 100, for a slow or loaded machine; scenarios whose margins are absolute are not stretched")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f, err
		}
		// The flag package already printed the error and the usage.
		return f, errFlagReported
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if f.nodes < 1 {
		return f, fmt.Errorf("--nodes %d: need at least 1 node", f.nodes)
	}
	if f.trials < 1 {
		return f, fmt.Errorf("--trials %d: need at least 1 trial", f.trials)
	}
	if f.parallel < 1 || f.parallel > maxParallel {
		return f, fmt.Errorf("--parallel %d: need from 1 to %d clusters", f.parallel, maxParallel)
	}
	if f.doc != "" && f.mutants {
		return f, errors.New("--doc writes the scenario table; it does not go with --mutants")
	}
	if len(f.mutantNames) > 0 && !f.mutants {
		return f, errors.New("--mutant picks among the mutants of --mutants: add --mutants")
	}
	f.args = args
	// Above maxTimeScale the stretched TTLs pass the retention (24 h) and
	// the durations overflow time.Duration: every trial would then fail,
	// reported as a verdict mismatch rather than as the bad flag it is.
	if !(f.timeScale >= 1 && f.timeScale <= maxTimeScale) {
		return f, fmt.Errorf("--time-scale %v: need a factor from 1 to %d", f.timeScale, maxTimeScale)
	}
	if _, err := chaos.ParseBackend(f.backend); err != nil {
		return f, fmt.Errorf("--backend %q: want %s or %s", f.backend, chaos.InProcess, chaos.RedisServer)
	}
	if _, err := chaos.ParseClockMode(f.clocks); err != nil {
		return f, fmt.Errorf("--clocks %q: want auto, real or emulated", f.clocks)
	}
	if f.fenced != "register" && f.fenced != "guard" && f.fenced != "redis" {
		return f, fmt.Errorf("--fenced %q: want register or redis", f.fenced)
	}
	return f, nil
}

// runChaos is `redlock chaos`: it runs the scenarios (or, with --mutants,
// the mutants) on one cluster and returns the exit status.
func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseChaosFlags(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.Is(err, errFlagReported) {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		}
		return exitUsage
	}
	scenarios := chaos.Catalogue()
	if f.list {
		listScenarios(stdout, scenarios)
		return 0
	}
	if f.mutants && len(f.scenarios) > 0 {
		fmt.Fprintln(stderr, "redlock chaos: --mutants runs each mutant's own scenarios; drop --scenario")
		return exitUsage
	}
	if f.mutants && !mutation.Available() {
		fmt.Fprintf(stderr, "redlock chaos: --mutants needs a redlock built with the mutant hooks: go run -tags %s ./cmd/redlock chaos --mutants\n", mutation.Tag)
		return exitUsage
	}
	if len(f.scenarios) > 0 {
		scenarios = pickScenarios(f.scenarios)
	}
	for i := range scenarios {
		scenarios[i] = scenarios[i].Scaled(f.timeScale)
	}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano())
	}
	backend, _ := chaos.ParseBackend(f.backend)
	if f.doc != "" {
		if err := checkVerdictDoc(f.doc, backend); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: --doc: %v\n", err)
			return exitUsage
		}
	}
	// Killed and partitioned nodes are the point here: go-redis's own
	// "failed to dial" lines would bury the progress.
	redis.SetLogger(quietLogger{})
	var progressMu sync.Mutex // scenarios run in parallel report at once
	progress := func(line string) {
		if !f.quiet {
			progressMu.Lock()
			defer progressMu.Unlock()
			// A line's leading spaces indent it; its continuation lines
			// go 4 further.
			lead := line[:len(line)-len(strings.TrimLeft(line, " "))]
			for _, l := range wrap(line, lead, lead+"    ", termWidth) {
				fmt.Fprintln(stderr, l)
			}
		}
	}
	what := plural(len(scenarios), "scenario") + " × " + plural(f.trials, "trial")
	if f.mutants {
		what = "the mutant catalogue"
		if len(f.mutantNames) > 0 {
			what = plural(len(f.mutantNames), "mutant")
		}
	}
	progress(fmt.Sprintf("redlock chaos: %s on %s", what, plural(f.nodes, string(backend)+" node")))
	progress(fmt.Sprintf("redlock chaos: seed %d, time scale %v", f.seed, f.timeScale))

	clocks, _ := chaos.ParseClockMode(f.clocks)
	opt := chaos.ClusterOptions{Backend: backend, Nodes: f.nodes, RedisBinary: f.redisBinary, Clocks: clocks}
	if f.fenced == "redis" {
		store, err := chaos.StartRedisStore(ctx, f.redisBinary)
		if err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitMismatch
		}
		defer store.Close()
		opt.Fenced = store
	}
	start, loadStart := time.Now(), mdsection.LoadAverage()
	n := min(f.parallel, len(scenarios))
	if f.mutants || opt.Fenced != nil {
		n = 1 // one fenced store, one cluster
	}
	if n > 1 {
		progress(fmt.Sprintf("redlock chaos: %d scenarios at a time, each cluster of its own", n))
	}
	var clusters []*chaos.Cluster
	defer func() {
		for _, c := range clusters {
			c.Close()
		}
	}()
	for range n {
		cluster, err := chaos.NewCluster(ctx, opt)
		if err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitMismatch
		}
		clusters = append(clusters, cluster)
	}
	progress("clocks: " + clusters[0].Clocks())
	progress("fenced resource: " + clusters[0].FencedStore().Name())

	if f.svgDir != "" {
		if err := os.MkdirAll(f.svgDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitUsage
		}
	}

	if f.mutants {
		return runMutants(ctx, clusters[0], f, stdout, stderr, progress)
	}

	results, ok := runScenarios(ctx, clusters, scenarios, f, stderr, progress)
	if !ok {
		return exitMismatch
	}
	code := reportChaos(results, f, backend, stdout, stderr)
	if f.doc != "" {
		run := mdsection.Run{Took: time.Since(start), LoadStart: loadStart, LoadEnd: mdsection.LoadAverage(), Code: code}
		if err := updateVerdictDoc(f.doc, results, f, backend, run); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: --doc: %v\n", err)
			return exitMismatch
		}
		progress("redlock chaos: rewrote the " + string(backend) + " verdict table in " + f.doc)
	}
	return code
}

// listScenarios prints every built-in scenario (chaos.Builtin), one a
// line: its name, expected verdict and summary; those not in catalogue,
// which a run without --scenario runs, say so.
func listScenarios(w io.Writer, catalogue []chaos.Scenario) {
	all := chaos.Builtin()
	width := 0
	for _, s := range all {
		width = max(width, len(s.Name))
	}
	for _, s := range all {
		note := ""
		if !slices.ContainsFunc(catalogue, func(c chaos.Scenario) bool { return c.Name == s.Name }) {
			note = " (only with --scenario)"
		}
		fmt.Fprintf(w, "%-*s  expect %-6s  %s%s\n", width, s.Name, s.Expect, s.Summary, note)
	}
}

// pickScenarios returns the catalogue's scenarios of these names (checked
// when the flags were parsed), in the order given.
func pickScenarios(names []string) []chaos.Scenario {
	var picked []chaos.Scenario
	for _, name := range names {
		s, _ := chaos.Find(name)
		picked = append(picked, s)
	}
	return picked
}

// runScenarios runs the scenarios, each on one of clusters (as many at
// once as there are clusters), reporting progress and writing the
// timelines f asks for. It returns the results in the order of scenarios,
// or false, having said why on stderr, when the harness fails or ctx ends.
func runScenarios(ctx context.Context, clusters []*chaos.Cluster, scenarios []chaos.Scenario, f chaosFlags, stderr io.Writer, progress func(string)) ([]chaos.Result, bool) {
	backend := clusters[0].Backend()
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make([]chaos.Result, len(scenarios))
	var (
		mu     sync.Mutex
		failed bool
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if !failed { // one reason, not one per cluster
			failed = true
			fmt.Fprintf(stderr, "redlock chaos: "+format+"\n", args...)
		}
		cancel()
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for _, cluster := range clusters {
		wg.Go(func() {
			for i := range next {
				s := scenarios[i]
				progress(fmt.Sprintf("[%d/%d] %s: %s", i+1, len(scenarios), s.Name, s.Summary))
				var trialProgress func(string)
				if f.verbose {
					trialProgress = func(line string) { progress("        " + line) }
				}
				res, err := chaos.Run(ctx, cluster, s, f.trials, f.seed, trialProgress)
				if ctx.Err() != nil {
					continue // interrupted, or another scenario failed
				}
				if err != nil {
					fail("%s: %v", s.Name, err)
					continue
				}
				if res.Skipped != "" {
					progress(fmt.Sprintf("        %s skipped on %s: %s", s.Name, backend, res.Skipped))
				}
				for _, n := range res.Notes {
					progress("        " + s.Name + " note: " + n)
				}
				if f.svgDir != "" && len(res.Histories) > 0 {
					if err := writeTimeline(f.svgDir, s, res, backend); err != nil {
						fail("%v", err)
					}
				}
				res.Histories = nil // drawn: a long run need not keep them
				results[i] = res
			}
		})
	}
	// The longest trials first, so that no cluster is left with a long
	// scenario at the end while the others idle; results stay in order.
	order := make([]int, len(scenarios))
	for i := range order {
		order[i] = i
	}
	if len(clusters) > 1 {
		slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(scenarios[b].Duration, scenarios[a].Duration) })
	}
feed:
	for _, i := range order {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if failed {
		return nil, false
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "redlock chaos: interrupted")
		return nil, false
	}
	progress(fmt.Sprintf("redlock chaos: done in %v", time.Since(start).Round(time.Millisecond)))
	return results, true
}

// reportChaos prints the results (a table, or JSON) and returns the exit
// status: exitMismatch if an observed verdict differs from the expected one
// or nothing ran.
func reportChaos(results []chaos.Result, f chaosFlags, backend chaos.Backend, stdout, stderr io.Writer) int {
	sum := summarizeChaos(results)
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Seed      uint64         `json:"seed,string"`
			Backend   chaos.Backend  `json:"backend"`
			Nodes     int            `json:"nodes"`
			TimeScale float64        `json:"time_scale"`
			Results   []chaos.Result `json:"results"`
			Summary   string         `json:"summary"`
		}{f.seed, backend, f.nodes, f.timeScale, results, sum.line()}); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitMismatch
		}
	} else if f.verbose {
		printWideTable(stdout, results, f.seed)
	} else {
		printTable(stdout, results, f.seed, f.trials, f.nodes, backend)
	}
	switch {
	case sum.mismatched > 0:
		fmt.Fprintln(stderr, "redlock chaos: some observed verdicts differ from the expected ones")
		return exitMismatch
	case sum.ran == 0:
		fmt.Fprintln(stderr, "redlock chaos: every scenario was skipped: nothing was tested")
		return exitMismatch
	}
	return 0
}

// chaosSummary counts a run's outcomes.
type chaosSummary struct{ ran, matched, mismatched, skipped int }

func summarizeChaos(results []chaos.Result) chaosSummary {
	var s chaosSummary
	for _, r := range results {
		switch {
		case r.Skipped != "":
			s.skipped++
		case r.Match():
			s.ran++
			s.matched++
		default:
			s.ran++
			s.mismatched++
		}
	}
	return s
}

// line is the run's final line, e.g. "14 of 14 as expected (2 skipped)".
func (s chaosSummary) line() string {
	out := fmt.Sprintf("%d of %d as expected", s.matched, s.ran)
	if s.skipped > 0 {
		out += fmt.Sprintf(" (%d skipped)", s.skipped)
	}
	if s.ran == 0 {
		out += ": nothing was tested"
	}
	return out
}

// termWidth is the width the default output of `redlock chaos` fits in.
const termWidth = 80

// printTable prints the default report, every line at most termWidth
// columns: one row per scenario, the legend, the notes and the final line.
func printTable(w io.Writer, results []chaos.Result, seed uint64, trials, nodes int, backend chaos.Backend) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tLOCKS\tNOT SAFE\tRATE\tSTALE P/F\tEXPECT\tOBSERVED")
	mismatch := false
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t%s\tskipped\n", r.Scenario, r.Expect)
			continue
		}
		observed := string(r.Observed)
		if r.Mismatch() {
			observed += " !"
			mismatch = true
		}
		fmt.Fprintf(tw, "%s\t%d\t%d/%d\t%s\t%d/%d\t%s\t%s\n", r.Scenario, r.Acquisitions, r.NotSafe(), r.Exercised(),
			rateBound(r), r.StalePlain, r.StaleFenced, r.Expect, observed)
	}
	tw.Flush()
	if mismatch {
		buf.WriteString("! the observed verdict differs from the expected one: see the notes\n")
	}
	buf.WriteString(chaosShortLegend)
	if hasRW(results) {
		buf.WriteString(chaosRWLegend)
	}
	var notes []string
	for _, r := range results {
		if r.Skipped != "" {
			notes = append(notes, r.Scenario+": skipped: "+r.Skipped)
		}
		for _, n := range r.Notes {
			notes = append(notes, r.Scenario+": "+n)
		}
	}
	if len(notes) > 0 {
		buf.WriteString("\nNotes:\n")
		for _, n := range notes {
			writeWrapped(&buf, n, "  ", "    ")
		}
	}
	fmt.Fprintf(&buf, "\n%s per scenario (up to %d for an expected-unsafe one).\n", plural(trials, "trial"), chaos.UnsafeTrialLimit)
	buf.WriteString("-v adds overlaps, token order, latency and why each verdict is expected;\n--json gives all.\n")
	if len(results) > 0 {
		writeWrapped(&buf, "clocks: "+results[0].Clocks, "", "  ")
		writeWrapped(&buf, "fenced resource: "+fencedStores(results), "", "  ")
	}
	fmt.Fprintf(&buf, "seed %d on %s\n%s\n", seed, plural(nodes, string(backend)+" node"), summarizeChaos(results).line())
	writeTrimmed(w, buf.Bytes())
}

// fencedStores names the fenced resources of the results, each once, in
// order: the cluster's, and fencing.RWRegister where read/write lock
// scenarios ran.
func fencedStores(results []chaos.Result) string {
	var names []string
	for _, r := range results {
		if r.FencedStore != "" && !slices.Contains(names, r.FencedStore) {
			names = append(names, r.FencedStore)
		}
	}
	return strings.Join(names, "; ")
}

// hasRW reports whether a read/write lock scenario is among the results.
func hasRW(results []chaos.Result) bool {
	return slices.ContainsFunc(results, func(r chaos.Result) bool {
		s, ok := chaos.Find(r.Scenario)
		return ok && s.Workload.Readers > 0
	})
}

// plural returns "1 trial", "2 trials".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// rateBound is a result's RATE cell: the bound on the rate of trials that
// were not safe that the run shows, at chaos.Confidence: "≤1.0%", the upper
// bound, for a scenario expected safe; "≥99%", the lower bound, for one
// expected unsafe. An upper bound is rounded up and a lower one down, so
// the cell never claims more than the bound.
func rateBound(r chaos.Result) string {
	if r.Expect == chaos.Unsafe {
		return "≥" + percent(r.RateLower, math.Floor)
	}
	return "≤" + percent(r.RateUpper, math.Ceil)
}

// percent formats p (0..1) as a percentage with two significant digits
// (at least the units), rounding with round: "1.0%", "0.30%", "78%", "100%".
func percent(p float64, round func(float64) float64) string {
	if p <= 0 {
		return "0%"
	}
	v := 100 * min(p, 1)
	digits := func(v float64) int {
		d := 0
		for scale := 10.0; v < scale && d < 4; scale /= 10 {
			d++
		}
		return d
	}
	d := digits(v)
	k := math.Pow(10, float64(d))
	// Undo the float error of the product before rounding: 0.3 × 100 is
	// 30.000000000000004, which math.Ceil would make 31.
	v = round(math.Round(v*k*1e6)/1e6) / k
	// Rounding up can add a digit in front: 0.9936 % is 1.0 %, not 1.00 %.
	return strconv.FormatFloat(v, 'f', digits(v), 64) + "%"
}

// tokenOrder is a result's TOKEN ORDER cell: "ok", or "N out".
func tokenOrder(r chaos.Result) string {
	if r.TokenOrder > 0 {
		return fmt.Sprintf("%d out", r.TokenOrder)
	}
	return "ok"
}

// chaosShortLegend explains the default table's columns and verdicts in
// termWidth columns.
var chaosShortLegend = `
LOCKS      locks taken, all trials together
NOT SAFE   trials that were not safe (unsafe or broken), of the trials that
           count (one that took no lock where some are expected does not)
RATE       what the run shows of the rate of such trials, at 95 % confidence
           (exact binomial bound): at most (≤) for a scenario expected safe,
           at least (≥) for one expected unsafe; 0 in 300 gives ≤1.0%
STALE P/F  writes a resource accepted from a holder after it had accepted one
           from a later holder: P the plain resource, which checks nothing;
           F the fenced one, fencing.Register (refuses a lower token)
safe       no trial had an overlap or a stale write; every check held
unsafe     some trial broke mutual exclusion: expected only where Redlock
           documents the limit (docs/safety.md)
broken     a promise of the library failed: see the notes
skipped    cannot run on this backend or number of nodes; not a pass
`

// chaosRWLegend says how the read/write lock's rows count, in termWidth
// columns.
var chaosRWLegend = `rw-...     a read/write lock's rows: readers and writers of one lock, where
           only a writer excludes; a reader's reads count as its writes, a
           stale one following a later writer's write; the fenced resource
           is fencing.RWRegister, which also refuses a paused writer's write
           once readers have read its token
`

// printWideTable prints the -v report: one wide row per scenario, the
// legend, each scenario's reason and the final line.
func printWideTable(w io.Writer, results []chaos.Result, seed uint64) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tBACKEND\tTRIALS\tNOT SAFE\tRATE (95%)\tACQUIRED\tVIOLATIONS\tSTALE PLAIN/FENCED\tTOKEN ORDER\tP50\tP99\tEXPECTED\tOBSERVED")
	for _, r := range results {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\tskipped\n", r.Scenario, r.Backend, r.Expect)
			continue
		}
		observed := string(r.Observed)
		if r.Mismatch() {
			observed += "  << MISMATCH"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d/%d\t%s\t%d\t%d\t%d/%d\t%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.Backend, r.Trials, r.NotSafe(), r.Exercised(), rateBound(r),
			r.Acquisitions, r.Violations, r.StalePlain, r.StaleFenced, tokenOrder(r), fmtLatency(r.P50), fmtLatency(r.P99), r.Expect, observed)
	}
	tw.Flush()
	buf.WriteString(chaosLegend)
	if hasRW(results) {
		buf.WriteString(chaosRWLegend)
	}
	buf.WriteString("\nWhy each verdict is expected:\n")
	for _, r := range results {
		writeWrapped(&buf, r.Scenario+": "+r.Why, "  ", "    ")
		if r.Skipped != "" {
			writeWrapped(&buf, "skipped: "+r.Skipped, "    ", "      ")
		}
		for _, n := range r.Notes {
			writeWrapped(&buf, "note: "+n, "    ", "      ")
		}
	}
	if len(results) > 0 {
		fmt.Fprintf(&buf, "\nclocks: %s\nfenced resource: %s\n", results[0].Clocks, fencedStores(results))
	}
	fmt.Fprintf(&buf, "\nseed %d\n%s\n", seed, summarizeChaos(results).line())
	writeTrimmed(w, buf.Bytes())
}

// chaosLegend explains the wide table's columns and verdicts.
var chaosLegend = fmt.Sprintf(`
TRIALS              trials run (an expected-unsafe scenario runs more, up to
                    %d, until one shows it)
NOT SAFE            trials that were not safe (unsafe or broken), of those
                    that count (a trial that took no lock where the scenario
                    expects some tested nothing: see the notes)
RATE (95%%)          what the run shows of the rate of such trials at 95 %%
                    confidence (exact binomial, Clopper-Pearson): at most (≤)
                    for a scenario expected safe, at least (≥) for one
                    expected unsafe; --json gives both bounds
ACQUIRED            locks taken, all trials together
VIOLATIONS          pairs of holders whose holds overlapped (mutual exclusion
                    broken)
STALE PLAIN/FENCED  writes a resource accepted from a holder after it had
                    accepted one from a later holder: the plain resource
                    checks nothing; the fenced one (named below the table)
                    refuses a lower token and accepts an equal one
TOKEN ORDER         ok when each holder's fencing token was above the
                    previous holder's; "N out" counts the pairs where it was
                    not
P50, P99            acquire latency of the successful calls
safe                no trial had a violation or a stale write, and every
                    check of the scenario held
unsafe              some trial broke mutual exclusion: expected only where
                    Redlock documents the limit
broken              a promise of the library failed (the fenced resource took
                    a stale write, tokens out of order, a lock handed out
                    without validity, ...): see the notes
skipped             the scenario cannot run on this backend or number of
                    nodes; not a pass
`, chaos.UnsafeTrialLimit)

// wrap breaks text at spaces into lines of at most width columns (runes),
// the first line starting with first, the others with indent. A word longer
// than a line stays whole.
func wrap(text, first, indent string, width int) []string {
	var lines []string
	line, prefix := "", first
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = prefix + word
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			prefix = indent
			line = prefix + word
		}
	}
	if line != "" || len(lines) == 0 {
		lines = append(lines, line)
	}
	return lines
}

// writeWrapped writes text wrapped to termWidth columns.
func writeWrapped(b *bytes.Buffer, text, first, indent string) {
	for _, l := range wrap(text, first, indent, termWidth) {
		b.WriteString(l)
		b.WriteByte('\n')
	}
}

// writeTrimmed writes b with the spaces at the ends of its lines removed.
func writeTrimmed(w io.Writer, b []byte) {
	lines := bytes.Split(b, []byte("\n"))
	for i, l := range lines {
		lines[i] = bytes.TrimRight(l, " ")
	}
	_, _ = w.Write(bytes.Join(lines, []byte("\n")))
}

func fmtLatency(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// writeTimeline writes the scenario's most telling trial: the first with a
// violation or stale write, else the first.
func writeTimeline(dir string, s chaos.Scenario, res chaos.Result, backend chaos.Backend) error {
	pick := 0
	for i, rep := range res.Reports {
		if rep.Violations > 0 || rep.StaleWritesPlain > 0 {
			pick = i
			break
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%s.svg", s.Name, backend))
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	title := fmt.Sprintf("%s (%s, trial %d, expect %s)", s.Name, backend, pick+1, s.Expect)
	if err := chaos.WriteSVG(out, title, res.Histories[pick]); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// mutantTrials is how many trials `--mutants` gives each scenario of a
// mutant; it stops at the first trial that catches the mutant.
const mutantTrials = 3

// mutantRow is one mutant's outcome.
type mutantRow struct {
	Mutant     string         `json:"mutant"`
	Summary    string         `json:"summary"`
	Caught     bool           `json:"caught"`
	NotCovered string         `json:"not_covered,omitempty"`
	Results    []chaos.Result `json:"results,omitempty"`
}

// runMutants runs every mutant against its scenarios and prints which caught
// it. It returns 1 if a covered mutant survived.
func runMutants(ctx context.Context, cluster *chaos.Cluster, f chaosFlags, stdout, stderr io.Writer, progress func(string)) int {
	var rows []mutantRow
	for _, m := range pickMutants(f.mutantNames) {
		row := mutantRow{Mutant: m.Name, Summary: m.Summary, NotCovered: m.NotCovered}
		if m.NotCovered != "" {
			progress(fmt.Sprintf("mutant %s: not covered: %s", m.Name, m.NotCovered))
			rows = append(rows, row)
			continue
		}
		for _, name := range m.Scenarios {
			s, _ := chaos.Find(name)
			res, err := chaos.RunMutant(ctx, cluster, s.Scaled(f.timeScale), m, mutantTrials, f.seed, nil)
			if err != nil {
				fmt.Fprintf(stderr, "redlock chaos: mutant %s, %s: %v\n", m.Name, name, err)
				return exitMismatch
			}
			row.Results = append(row.Results, res)
			row.Caught = row.Caught || res.Mismatch()
			progress(fmt.Sprintf("mutant %s, %s: %s", m.Name, name, mutantCell(res)))
		}
		rows = append(rows, row)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "redlock chaos: interrupted")
			return exitMismatch
		}
	}
	caught, covered, survived := 0, 0, 0
	for _, r := range rows {
		if r.NotCovered != "" {
			continue
		}
		covered++
		if r.Caught {
			caught++
		} else {
			survived++
		}
	}
	line := fmt.Sprintf("%d of %d mutants caught", caught, covered)
	if n := len(rows) - covered; n > 0 {
		line += fmt.Sprintf(" (%d not covered yet)", n)
	}
	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Seed    uint64      `json:"seed,string"`
			Nodes   int         `json:"nodes"`
			Mutants []mutantRow `json:"mutants"`
			Summary string      `json:"summary"`
		}{f.seed, f.nodes, rows, line}); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitMismatch
		}
	} else {
		printMutants(stdout, rows, f.seed, line, f.verbose)
	}
	if survived > 0 {
		fmt.Fprintf(stderr, "redlock chaos: %d mutants survived: the harness did not notice the broken lock\n", survived)
		return exitMismatch
	}
	return 0
}

// pickMutants returns the mutants --mutants runs: those named (checked when
// the flags were parsed), in the order given, or every one of chaos.Mutants,
// the lock's and the read/write lock's.
func pickMutants(names []string) []chaos.Mutant {
	all := chaos.Mutants()
	if len(names) == 0 {
		return all
	}
	var picked []chaos.Mutant
	for _, name := range names {
		if i := slices.IndexFunc(all, func(m chaos.Mutant) bool { return m.Name == name }); i >= 0 {
			picked = append(picked, all[i])
		}
	}
	return picked
}

// mutantCell says what one scenario saw of a mutant, e.g.
// "caught in trial 1: broken, 3 violations, stale 0/2, 4 tokens out".
func mutantCell(r chaos.Result) string {
	if r.Skipped != "" {
		return "skipped: " + r.Skipped
	}
	verdict := "not caught in " + strconv.Itoa(r.Trials) + " trials"
	if r.Mismatch() {
		verdict = fmt.Sprintf("caught in trial %d: %s", r.Trials, r.Observed)
	}
	return fmt.Sprintf("%s, %d violations, stale %d/%d, %d tokens out", verdict, r.Violations, r.StalePlain, r.StaleFenced, r.TokenOrder)
}

// printMutants prints one row per mutant and scenario, the legend and the
// final line; the default fits termWidth columns, verbose adds the counts.
func printMutants(w io.Writer, rows []mutantRow, seed uint64, line string, verbose bool) {
	var buf bytes.Buffer
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	if verbose {
		fmt.Fprintln(tw, "MUTANT\tSCENARIO\tTRIALS\tVIOLATIONS\tSTALE PLAIN/FENCED\tTOKEN ORDER\tOBSERVED\tRESULT")
	} else {
		fmt.Fprintln(tw, "MUTANT\tSCENARIO\tOBSERVED\tRESULT")
	}
	for _, r := range rows {
		if r.NotCovered != "" {
			if verbose {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\tNOT COVERED\n", r.Mutant)
			} else {
				fmt.Fprintf(tw, "%s\t-\t-\tNOT COVERED\n", r.Mutant)
			}
			continue
		}
		for _, res := range r.Results {
			result := "survived"
			if res.Mismatch() {
				result = "caught"
			}
			if verbose {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d/%d\t%d out\t%s (expect %s)\t%s\n", r.Mutant, res.Scenario, res.Trials,
					res.Violations, res.StalePlain, res.StaleFenced, res.TokenOrder, res.Observed, res.Expect, result)
			} else {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.Mutant, res.Scenario, res.Observed, result)
			}
		}
	}
	tw.Flush()
	buf.WriteString(`
A mutant is a deliberately broken build of the lock, run through the same
workloads. It is caught when a scenario's observed verdict differs from the
one expected of a correct lock (EXPECT in the scenario table); each
scenario runs up to 3 trials and stops at the first that catches it.
-v adds the trials and the counts of the scenario table.

Mutants:
`)
	for _, r := range rows {
		writeWrapped(&buf, r.Mutant+": "+r.Summary, "  ", "    ")
		if r.NotCovered != "" {
			writeWrapped(&buf, "not covered yet: "+r.NotCovered, "    ", "      ")
		}
		for _, res := range r.Results {
			for _, n := range res.Notes {
				writeWrapped(&buf, res.Scenario+", "+n, "    ", "      ")
			}
		}
	}
	fmt.Fprintf(&buf, "\nseed %d\n%s\n", seed, line)
	writeTrimmed(w, buf.Bytes())
}
