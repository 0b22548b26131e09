package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/chaos"
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
how many locks were taken, how many times two holders overlapped, how many
stale writes a plain and a fenced resource accepted, whether fencing tokens
rose in the order the holders held the lock, the acquire latency, and
the expected and observed verdicts. Exits 1 if any observed verdict differs
from the expected one.

By default it runs every scenario on 5 in-process nodes (no set-up).

Examples:
  redlock chaos
  redlock chaos --scenario client-pause --scenario amnesia-restart --svg out/
  redlock chaos --backend redis-server --trials 3 --seed 42 --json

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
}

func parseChaosFlags(args []string, stderr io.Writer) (chaosFlags, error) {
	var f chaosFlags
	fs := flag.NewFlagSet("redlock chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, chaosHelp)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.backend, "backend", string(chaos.InProcess), "node backend: inprocess (miniredis, no set-up) or redis-server (real processes; needs redis-server on PATH)")
	fs.IntVar(&f.nodes, "nodes", 5, "number of nodes N (at least 3 for most scenarios)")
	fs.Func("scenario", "run only this scenario (repeatable; default all; see --list)", func(s string) error {
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
	fs.BoolVar(&f.list, "list", false, "list the scenarios and exit")
	fs.StringVar(&f.redisBinary, "redis-server", "", "path to redis-server for --backend redis-server (default: PATH)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines")
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
	if _, err := chaos.ParseBackend(f.backend); err != nil {
		return f, fmt.Errorf("--backend %q: want %s or %s", f.backend, chaos.InProcess, chaos.RedisServer)
	}
	return f, nil
}

func runChaos(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseChaosFlags(args, stderr)
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
		for _, s := range scenarios {
			fmt.Fprintf(stdout, "%-22s expect %-6s  %s\n", s.Name, s.Expect, s.Summary)
		}
		return 0
	}
	if len(f.scenarios) > 0 {
		var picked []chaos.Scenario
		for _, name := range f.scenarios {
			s, _ := chaos.Find(name)
			picked = append(picked, s)
		}
		scenarios = picked
	}
	if f.seed == 0 {
		f.seed = uint64(time.Now().UnixNano())
	}
	backend, _ := chaos.ParseBackend(f.backend)
	// Killed and partitioned nodes are the point here: go-redis's own
	// "failed to dial" lines would bury the progress.
	redis.SetLogger(quietLogger{})
	progress := func(line string) {
		if !f.quiet {
			fmt.Fprintln(stderr, line)
		}
	}
	progress(fmt.Sprintf("redlock chaos: %d scenarios × %d trials on %d %s nodes, seed %d", len(scenarios), f.trials, f.nodes, backend, f.seed))

	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Backend: backend, Nodes: f.nodes, RedisBinary: f.redisBinary})
	if err != nil {
		fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
		return exitMismatch
	}
	defer cluster.Close()

	if f.svgDir != "" {
		if err := os.MkdirAll(f.svgDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitUsage
		}
	}

	start := time.Now()
	var results []chaos.Result
	ok := true
	for i, s := range scenarios {
		progress(fmt.Sprintf("[%d/%d] %s: %s", i+1, len(scenarios), s.Name, s.Summary))
		res, err := chaos.Run(ctx, cluster, s, f.trials, f.seed, func(line string) { progress("        " + line) })
		if err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %s: %v\n", s.Name, err)
			return exitMismatch
		}
		if res.Skipped != "" {
			progress(fmt.Sprintf("        skipped on %s: %s", backend, res.Skipped))
		}
		for _, n := range res.Notes {
			progress("        note: " + n)
		}
		if !res.Match() {
			ok = false
		}
		results = append(results, res)
		if f.svgDir != "" && len(res.Histories) > 0 {
			if err := writeTimeline(f.svgDir, s, res, backend); err != nil {
				fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
				return exitMismatch
			}
		}
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "redlock chaos: interrupted")
			return exitMismatch
		}
	}
	progress(fmt.Sprintf("redlock chaos: done in %v", time.Since(start).Round(time.Millisecond)))

	if f.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(struct {
			Seed    uint64         `json:"seed"`
			Backend chaos.Backend  `json:"backend"`
			Nodes   int            `json:"nodes"`
			Results []chaos.Result `json:"results"`
		}{f.seed, backend, f.nodes, results}); err != nil {
			fmt.Fprintf(stderr, "redlock chaos: %v\n", err)
			return exitMismatch
		}
	} else {
		printTable(stdout, results, f.seed)
	}
	if !ok {
		fmt.Fprintln(stderr, "redlock chaos: some observed verdicts differ from the expected ones")
		return exitMismatch
	}
	return 0
}

// printTable prints one row per scenario.
func printTable(w io.Writer, results []chaos.Result, seed uint64) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tBACKEND\tTRIALS\tACQUIRED\tVIOLATIONS\tSTALE PLAIN/FENCED\tTOKEN ORDER\tP50\tP99\tEXPECTED\tOBSERVED\t")
	for _, r := range results {
		observed := string(r.Observed)
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t%s\tskipped\t\n", r.Scenario, r.Backend, r.Expect)
			continue
		}
		if !r.Match() {
			observed += "  << MISMATCH"
		}
		order := "ok"
		if r.TokenOrder > 0 {
			order = fmt.Sprintf("%d out", r.TokenOrder)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d/%d\t%s\t%s\t%s\t%s\t%s\t\n", r.Scenario, r.Backend, r.Trials, r.Acquisitions,
			r.Violations, r.StalePlain, r.StaleFenced, order, fmtLatency(r.P50), fmtLatency(r.P99), r.Expect, observed)
	}
	tw.Flush()
	fmt.Fprintf(w, "seed %d\n", seed)
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
