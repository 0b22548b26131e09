// Command pgchaos runs the chaos scenarios in which the fenced resource
// decides something (client-pause, the amnesia and the clock scenarios)
// with PostgreSQL as that resource: a server of its own (initdb on a free
// port, as the user postgres when run as root), written with the
// conditional UPDATE of docs/fencing.md, on real redis-server nodes with
// real clocks where a C compiler is found.
//
//	go run ./cmd/pgchaos --seed 20261129
//
// It prints one row per scenario, each scenario's notes, which clocks and
// which store were used, and exits 1 if an observed verdict differs from
// the expected one or the harness failed.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/pgfence"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pgchaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	trials := fs.Int("trials", 2, "trials per scenario")
	seed := fs.Uint64("seed", 0, "seed for fault schedules (default: from the clock; printed)")
	nodes := fs.Int("nodes", chaos.DefaultNodes, "number of redis-server nodes")
	scale := fs.Float64("time-scale", 1, "stretch every scenario's durations by this factor (1 to 100), for a slow or loaded machine")
	clocks := fs.String("clocks", "auto", "how the nodes' clocks move: auto, real or emulated")
	if err := fs.Parse(args); err != nil {
		return 64
	}
	mode, err := chaos.ParseClockMode(*clocks)
	if err != nil || *trials < 1 || *nodes < 3 || !(*scale >= 1 && *scale <= 100) || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "pgchaos: want --trials ≥ 1, --nodes ≥ 3, --time-scale from 1 to 100, --clocks auto|real|emulated, no arguments")
		return 64
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	redis.SetLogger(&logging.VoidLogger{})

	srv, err := pgfence.StartServer(ctx, "")
	if err != nil {
		fmt.Fprintln(stderr, "pgchaos:", err)
		return 1
	}
	defer srv.Close()
	store, err := pgfence.NewStore(ctx, srv.ConnString())
	if err != nil {
		fmt.Fprintln(stderr, "pgchaos:", err)
		return 1
	}
	defer store.Close()
	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Backend: chaos.RedisServer, Nodes: *nodes, Clocks: mode, Fenced: store})
	if err != nil {
		fmt.Fprintln(stderr, "pgchaos:", err)
		return 1
	}
	defer cluster.Close()

	start := time.Now()
	var results []chaos.Result
	for _, s := range chaos.StoreScenarios() {
		res, err := chaos.Run(ctx, cluster, s.Scaled(*scale), *trials, *seed, func(line string) { fmt.Fprintln(stderr, line) })
		if err != nil {
			fmt.Fprintf(stderr, "pgchaos: %s: %v\n", s.Name, err)
			return 1
		}
		results = append(results, res)
	}
	fmt.Fprintf(stderr, "pgchaos: done in %v\n", time.Since(start).Round(time.Second))

	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTRIALS\tACQUIRED\tVIOLATIONS\tSTALE PLAIN/FENCED\tTOKEN ORDER\tEXPECTED\tOBSERVED")
	matched := 0
	for _, r := range results {
		order := "ok"
		if r.TokenOrder > 0 {
			order = fmt.Sprintf("%d out", r.TokenOrder)
		}
		observed := string(r.Observed)
		switch {
		case r.Skipped != "":
			observed = "skipped"
		case r.Match():
			matched++
		default:
			observed += "  << MISMATCH"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d/%d\t%s\t%s\t%s\n", r.Scenario, r.Trials, r.Acquisitions, r.Violations,
			r.StalePlain, r.StaleFenced, order, r.Expect, observed)
	}
	tw.Flush()
	for _, r := range results {
		for _, n := range append([]string{r.Skipped}, r.Notes...) {
			if n != "" {
				fmt.Fprintf(stdout, "  %s: %s\n", r.Scenario, n)
			}
		}
	}
	fmt.Fprintf(stdout, "clocks: %s\nfenced resource: %s\nseed %d\n%d of %d as expected\n",
		cluster.Clocks(), store.Name(), *seed, matched, len(results))
	if matched != len(results) {
		return 1
	}
	return 0
}
