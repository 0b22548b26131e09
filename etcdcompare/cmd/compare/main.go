// Command compare runs the chaos catalogue's scenarios against Redlock (the
// chaos harness, in-process nodes) and against etcd's lock
// (concurrency.Session + Mutex on an embedded 3-member cluster), and prints
// both outcomes side by side. It exits 1 if any observed verdict differs from
// the expected one, 64 on bad usage.
//
//	cd etcdcompare && go run ./cmd/compare
//	go run ./cmd/compare --scenario client-pause --trials 3 --svg out/
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/etcdcompare"
	"github.com/d3b93e30/redlock/internal/mdsection"
)

// quietLogger drops go-redis's internal log lines (killed nodes are the point).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

const usage = `Usage: compare [flags]

Runs each chaos scenario on Redlock (in-process nodes) and its equivalent on
etcd (embedded 3-member cluster, concurrency.Mutex, create revision as the
fencing token), the same number of trials each, and prints one table.

Flags:
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	var (
		trials   = fs.Int("trials", 3, "trials per scenario, on each side")
		seed     = fs.Uint64("seed", 0, "seed for fault schedules (default: from the clock; printed)")
		nodes    = fs.Int("nodes", 5, "Redlock nodes, as in `redlock chaos` (etcd always has 3 members)")
		svgDir   = fs.String("svg", "", "write the most telling trial of each scenario as <scenario>-redlock.svg and <scenario>-etcd.svg into this directory")
		markdown = fs.Bool("markdown", false, "print the table as Markdown")
		doc      = fs.String("doc", "", "after the run, rewrite the table between "+etcdcompare.DocBegin+" and "+etcdcompare.DocEnd+" in this Markdown file")
		scale    = fs.Float64("time-scale", 1, "stretch the Redlock side's scenarios by this factor (1 to 100), as redlock chaos --time-scale does, for a loaded machine; etcd's side keeps its whole-second leases")
		quiet    = fs.Bool("quiet", false, "no progress lines")
		picked   []etcdcompare.Scenario
	)
	fs.Func("scenario", "run only this scenario (repeatable; default all)", func(name string) error {
		s, ok := etcdcompare.Find(name)
		if !ok {
			return fmt.Errorf("unknown scenario %q", name)
		}
		picked = append(picked, s)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 64
	}
	if fs.NArg() > 0 || *trials < 1 || *nodes < 3 || !(*scale >= 1 && *scale <= 100) {
		fmt.Fprintln(stderr, "compare: want no arguments, --trials ≥ 1, --nodes ≥ 3 and --time-scale from 1 to 100")
		return 64
	}
	if *doc != "" {
		if err := etcdcompare.CheckDoc(*doc); err != nil {
			fmt.Fprintf(stderr, "compare: --doc: %v\n", err)
			return 64
		}
	}
	scenarios := etcdcompare.Catalogue()
	if len(picked) > 0 {
		scenarios = picked
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	progress := func(line string) {
		if !*quiet {
			fmt.Fprintln(stderr, line)
		}
	}
	redis.SetLogger(quietLogger{})
	if *svgDir != "" {
		if err := os.MkdirAll(*svgDir, 0o755); err != nil {
			fmt.Fprintf(stderr, "compare: %v\n", err)
			return 64
		}
	}
	progress(fmt.Sprintf("compare: %d scenarios × %d trials, Redlock on %d in-process nodes, etcd on 3 embedded members, seed %d",
		len(scenarios), *trials, *nodes, *seed))

	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Backend: chaos.InProcess, Nodes: *nodes})
	if err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 1
	}
	defer cluster.Close()

	start, loadStart := time.Now(), mdsection.LoadAverage()
	ok := true
	var rows []etcdcompare.Row
	for i, s := range scenarios {
		progress(fmt.Sprintf("[%d/%d] %s", i+1, len(scenarios), s.Name))
		row := etcdcompare.Row{Scenario: s.Name}
		rs, found := chaos.Find(s.Redlock)
		if s.Name == "uncontended" {
			// The chaos catalogue has no single-client scenario: no-faults
			// with one client is one.
			rs, found = chaos.Find("no-faults")
			rs.Name, rs.Summary, rs.Workload.Clients = s.Name, s.Summary, 1
		}
		if found {
			r, err := chaos.Run(ctx, cluster, rs.Scaled(*scale), *trials, *seed, func(l string) { progress("  redlock " + l) })
			if err != nil {
				fmt.Fprintf(stderr, "compare: redlock %s: %v\n", s.Name, err)
				return 1
			}
			for _, n := range r.Notes {
				progress("  redlock note: " + n)
			}
			ok = ok && !r.Mismatch() // a skipped scenario (it needs real clocks) is said in its row, not a differing verdict
			row.Redlock = &r
		}
		e, err := etcdcompare.Run(ctx, s, *trials, *seed, func(l string) { progress("  etcd    " + l) })
		if err != nil {
			fmt.Fprintf(stderr, "compare: etcd %s: %v\n", s.Name, err)
			return 1
		}
		if e.Skipped != "" {
			progress("  etcd    " + e.Skipped)
		}
		for _, n := range e.Notes {
			progress("  etcd    note: " + n)
		}
		ok = ok && e.Match()
		row.Etcd = e
		rows = append(rows, row)
		if *svgDir != "" {
			if err := writeSVGs(*svgDir, row); err != nil {
				fmt.Fprintf(stderr, "compare: %v\n", err)
				return 1
			}
		}
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "compare: interrupted")
			return 1
		}
	}
	took := time.Since(start)
	progress(fmt.Sprintf("compare: done in %v", took.Round(time.Second)))
	if err := etcdcompare.WriteTable(stdout, rows, *markdown); err != nil {
		fmt.Fprintf(stderr, "compare: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "seed %d\n", *seed)
	code := 0
	if !ok {
		fmt.Fprintln(stderr, "compare: some observed verdicts differ from the expected ones")
		code = 1
	}
	if *doc != "" {
		run := etcdcompare.RunFacts{Command: "cd etcdcompare && go run ./cmd/compare " + strings.Join(args, " "),
			Took: took, LoadStart: loadStart, LoadEnd: mdsection.LoadAverage(), Code: code}
		if err := etcdcompare.UpdateDoc(*doc, rows, run); err != nil {
			fmt.Fprintf(stderr, "compare: --doc: %v\n", err)
			return 1
		}
		progress("compare: rewrote the table in " + *doc)
	}
	return code
}

// telling returns the index of the first trial with a violation or a stale
// plain write, else 0.
func telling(reports []chaos.Report) int {
	for i, r := range reports {
		if r.Violations > 0 || r.StaleWritesPlain > 0 {
			return i
		}
	}
	return 0
}

// writeSVGs draws each side's most telling trial.
func writeSVGs(dir string, row etcdcompare.Row) error {
	write := func(side string, reports []chaos.Report, histories []chaos.History) error {
		if len(histories) == 0 {
			return nil
		}
		pick := telling(reports)
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%s-%s.svg", row.Scenario, side)))
		if err != nil {
			return err
		}
		title := fmt.Sprintf("%s on %s (trial %d)", row.Scenario, side, pick+1)
		if err := chaos.WriteSVG(f, title, histories[pick]); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	if r := row.Redlock; r != nil {
		if err := write("redlock", r.Reports, r.Histories); err != nil {
			return err
		}
	}
	return write("etcd", row.Etcd.Reports, row.Etcd.Histories)
}
