// Command dailyreport runs the daily-report use case on a Redlock of N nodes:
// 5 worker pods (goroutines, each with its own redlock.Client, as separate
// processes would have) all try to build the reports of the same 8 clients at
// once, with dailyreport.BuildReport: under Client.Do, the lock extended while
// a report builds, each report saved with its lock's fencing token to a
// report store that refuses stale tokens. Each report must be built exactly
// once per round, and never by two pods at the same time.
//
// By default it starts 5 in-process miniredis nodes, so it needs no set-up;
// the report store is always one more in-process miniredis:
//
//	go run ./examples/dailyreport/cmd/dailyreport
//	go run ./examples/dailyreport/cmd/dailyreport --rounds 3
//	go run ./examples/dailyreport/cmd/dailyreport --nodes redis://127.0.0.1:6379,redis://127.0.0.1:6380,redis://127.0.0.1:6381
//
// It prints, per client, which pod built the report and how many pods found
// it locked, and exits 0 when every report was built exactly once in every
// round (1 otherwise, 2 for bad flags).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/examples/dailyreport"
)

const (
	pods           = 5
	embeddedNodes  = 5
	roundTimeout   = 40 * time.Second // > dailyreport.TTL: locks left by a crashed earlier run expire first
	detailRounds   = 3                // per-client lines for every round when there are at most this many (always for a failed round)
	minBuild       = 20 * time.Millisecond
	maxBuild       = 80 * time.Millisecond
	passPauseLimit = 20 * time.Millisecond
)

var clients = []string{"acme", "globex", "initech", "umbrella", "hooli", "stark", "wayne", "wonka"}

func main() {
	// go-redis logs every failed dial to stderr; the lock errors this program
	// prints already name each node's outcome.
	redis.SetLogger(quietLogger{})
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// run is the program; it returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dailyreport", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesFlag := fs.String("nodes", "", "comma-separated Redis node URLs (redis://host:port, rediss://, redis://user:pass@host:port/db)\n(default: 5 in-process miniredis nodes)")
	rounds := fs.Int("rounds", 1, "number of daily runs")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *rounds < 1 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "dailyreport: --rounds must be at least 1 and no arguments are taken")
		fs.Usage()
		return 2
	}

	urls, where, stop, err := nodeURLs(*nodesFlag)
	if err != nil {
		fmt.Fprintln(stderr, "dailyreport:", err)
		return 2
	}
	defer stop()
	// The report store (a bucket in real life): not one of the lock's nodes.
	storeNode, err := miniredis.Run()
	if err != nil {
		fmt.Fprintln(stderr, "dailyreport: start the report store:", err)
		return 1
	}
	defer storeNode.Close()
	storeRDB := redis.NewClient(&redis.Options{Addr: storeNode.Addr()})
	defer storeRDB.Close()

	// One Redlock client per pod, as separate processes would have.
	workers := make([]*redlock.Client, pods)
	for i := range workers {
		c, err := redlock.Dial(urls)
		if err != nil {
			fmt.Fprintln(stderr, "dailyreport:", err)
			return 2
		}
		defer c.Close()
		workers[i] = c
	}
	if err := preflight(workers[0]); err != nil {
		fmt.Fprintln(stderr, "dailyreport: cannot lock on the nodes:", err)
		return 1
	}

	fmt.Fprintf(stdout, "%d pods, %d clients, %s (quorum %d), lock TTL %v; reports saved with their fencing tokens\n",
		pods, len(clients), where, workers[0].Quorum(), dailyreport.TTL)
	failed := 0
	for r := 1; r <= *rounds; r++ {
		res := runRound(workers, dailyreport.NewStore(storeRDB, fmt.Sprintf("day-%d", r)))
		ok := res.ok()
		if !ok {
			failed++
		}
		res.print(stdout, r, !ok || *rounds <= detailRounds)
	}
	if failed > 0 {
		fmt.Fprintf(stdout, "FAIL: %d of %d rounds did not build every report exactly once\n", failed, *rounds)
		return 1
	}
	fmt.Fprintf(stdout, "OK: every report built exactly once in each of %d round(s)\n", *rounds)
	return 0
}

// nodeURLs returns the node URLs from --nodes, or starts the embedded nodes.
// stop shuts down what it started.
func nodeURLs(flagValue string) (urls []string, where string, stop func(), err error) {
	if flagValue != "" {
		for _, u := range strings.Split(flagValue, ",") {
			u = strings.TrimSpace(u)
			if u == "" {
				continue
			}
			if !strings.Contains(u, "://") {
				u = "redis://" + u
			}
			urls = append(urls, u)
		}
		if len(urls) == 0 {
			return nil, "", nil, errors.New("--nodes lists no node")
		}
		// Names only, never the URLs: they may hold passwords.
		c, err := redlock.Dial(urls)
		if err != nil {
			return nil, "", nil, err
		}
		defer c.Close()
		return urls, fmt.Sprintf("%d Redis nodes [%s]", len(urls), strings.Join(c.Nodes(), " ")), func() {}, nil
	}

	var ms []*miniredis.Miniredis
	stop = func() {
		for _, m := range ms {
			m.Close()
		}
	}
	for range embeddedNodes {
		m, err := miniredis.Run()
		if err != nil {
			stop()
			return nil, "", nil, fmt.Errorf("start embedded node: %w", err)
		}
		m.ClockTTL(true) // keys expire on the wall clock, as on Redis
		ms = append(ms, m)
		urls = append(urls, "redis://"+m.Addr())
	}
	return urls, fmt.Sprintf("%d in-process miniredis nodes", embeddedNodes), stop, nil
}

// preflight takes and releases a lock once, so that unreachable nodes give
// one clear error (after 10 s of attempts) instead of rounds that never end.
// It retries: one attempt's votes can time out on a busy machine.
func preflight(c *redlock.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Acquire(ctx, "dailyreport:preflight", dailyreport.TTL, redlock.WithFencing(false))
	if err != nil {
		return err
	}
	_ = l.Release(ctx) // a key it misses expires at the TTL and blocks no report
	return nil
}

// round is one daily run: the report store shared by the pods and what
// each pod saw.
type round struct {
	store     *dailyreport.Store
	mu        sync.Mutex
	builtBy   map[string][]int        // client -> pods that saved its report
	building  map[string]int          // client -> builds in progress
	overlaps  int                     // builds that started while another was in progress
	lockedFor map[string]map[int]bool // client -> pods that found it locked (redlock.ErrTaken)
	conflicts int                     // redlock.ErrTaken results, in all
	skipped   map[string]int          // client -> pods that got the lock after the report was built
	misstored int                     // built reports missing from the store, or not as their builder saved them
	errs      []error
	elapsed   time.Duration
}

func runRound(workers []*redlock.Client, store *dailyreport.Store) *round {
	r := &round{
		store:     store,
		builtBy:   map[string][]int{},
		building:  map[string]int{},
		lockedFor: map[string]map[int]bool{},
		skipped:   map[string]int{},
	}
	ctx, cancel := context.WithTimeout(context.Background(), roundTimeout)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i, c := range workers {
		wg.Go(func() { r.pod(ctx, i+1, c) })
	}
	wg.Wait()
	r.elapsed = time.Since(start)
	r.verify(ctx)
	return r
}

// pod goes over the clients whose report is not built yet, in its own random
// order, until all are built. A report found locked is left for later.
func (r *round) pod(ctx context.Context, id int, c *redlock.Client) {
	for ctx.Err() == nil {
		todo := r.pending()
		if len(todo) == 0 {
			return
		}
		rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
		for _, client := range todo {
			if r.done(client) {
				continue
			}
			built, err := dailyreport.BuildReport(ctx, c, r.store, client, func(ctx context.Context) ([]byte, error) {
				return r.render(ctx, id, client)
			})
			switch {
			case built:
				r.saved(id, client)
			case err == nil:
				r.sawBuilt(client)
			case errors.Is(err, redlock.ErrTaken):
				r.sawLocked(id, client)
			}
			if err != nil && !errors.Is(err, redlock.ErrTaken) {
				r.fail(fmt.Errorf("pod %d: %w", id, err))
			}
		}
		sleep(ctx, rand.N(passPauseLimit))
	}
}

// render is the work done under the lock: build the PDF, stopping if the
// lock is lost (ctx ends).
func (r *round) render(ctx context.Context, pod int, client string) ([]byte, error) {
	r.mu.Lock()
	if r.building[client] > 0 {
		r.overlaps++
	}
	r.building[client]++
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.building[client]--
		r.mu.Unlock()
	}()
	sleep(ctx, minBuild+rand.N(maxBuild-minBuild))
	if ctx.Err() != nil {
		return nil, context.Cause(ctx)
	}
	return []byte(reportText(pod, client)), nil
}

func reportText(pod int, client string) string {
	return fmt.Sprintf("daily report of %s, built by pod %d", client, pod)
}

// verify checks the store: each built report is there, saved by its builder.
func (r *round) verify(ctx context.Context) {
	for _, c := range clients {
		pods := r.builtBy[c]
		if len(pods) != 1 {
			continue // ok reports it
		}
		report, token, err := r.store.Load(ctx, c)
		switch {
		case err != nil:
			err = fmt.Errorf("store: report of %s: %w", c, err)
		case string(report) != reportText(pods[0], c) || token == 0:
			err = fmt.Errorf("store: report of %s is %q with token %d, want pod %d's with a fencing token", c, report, token, pods[0])
		}
		if err != nil {
			r.misstored++
			r.fail(err)
		}
	}
}

func (r *round) pending() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var todo []string
	for _, c := range clients {
		if len(r.builtBy[c]) == 0 {
			todo = append(todo, c)
		}
	}
	return todo
}

func (r *round) done(client string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.builtBy[client]) > 0
}

func (r *round) saved(pod int, client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.builtBy[client] = append(r.builtBy[client], pod)
}

func (r *round) sawBuilt(client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.skipped[client]++
}

func (r *round) sawLocked(pod int, client string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lockedFor[client] == nil {
		r.lockedFor[client] = map[int]bool{}
	}
	r.lockedFor[client][pod] = true
	r.conflicts++
}

func (r *round) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

// ok reports whether every report was built exactly once, never by two pods
// at the same time, and is in the store as its builder saved it.
func (r *round) ok() bool {
	for _, c := range clients {
		if len(r.builtBy[c]) != 1 {
			return false
		}
	}
	return r.overlaps == 0 && r.misstored == 0
}

func (r *round) print(w io.Writer, n int, details bool) {
	verdict := "ok"
	if !r.ok() {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "round %d: %s in %v, %d lock conflicts, %d errors\n",
		n, verdict, r.elapsed.Round(time.Millisecond), r.conflicts, len(r.errs))
	if details {
		for _, c := range clients {
			line := fmt.Sprintf("  %-9s %-15s found locked by %d pod(s)", c, builders(r.builtBy[c]), len(r.lockedFor[c]))
			if s := r.skipped[c]; s > 0 {
				line += fmt.Sprintf(", already built for %d", s)
			}
			fmt.Fprintln(w, line)
		}
	}
	if r.overlaps > 0 {
		fmt.Fprintf(w, "  %d build(s) overlapped with another pod's build of the same report\n", r.overlaps)
	}
	for i, err := range r.errs {
		if i == 3 {
			fmt.Fprintf(w, "  ... and %d more errors\n", len(r.errs)-i)
			break
		}
		fmt.Fprintln(w, "  error:", err)
	}
}

func builders(pods []int) string {
	switch len(pods) {
	case 0:
		return "NOT BUILT"
	case 1:
		return fmt.Sprintf("built by pod %d", pods[0])
	}
	s := slices.Clone(pods)
	slices.Sort(s)
	return fmt.Sprintf("BUILT %d TIMES (pods %v)", len(s), s)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
