package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// trialSeed derives the seed of one trial of one scenario from the run's
// seed, so a scenario replays the same schedule whatever else ran.
func trialSeed(seed uint64, scenario string, trial int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", seed, scenario, trial)
	return h.Sum64()
}

// Run runs s for trials trials on cluster, healing and wiping the cluster
// before each trial, and returns the aggregated result. A scenario expected
// to be unsafe that showed no violation in those trials gets more, up to
// UnsafeTrialLimit in all, and its notes say how many it took. progress, if
// not nil, is called with a line after each trial. It returns an error only
// when the harness itself fails (a node cannot be healed, or the porcupine
// cross-check disagrees with the oracle: see the package doc); a fault the
// backend cannot produce makes the result Skipped.
//
// The verdict: Broken if any trial broke a promise of the library; else
// Unsafe if any trial was unsafe (an expected-unsafe scenario claims that
// the failure can happen, so one trial shows it; an expected-safe one must
// be safe in every trial); else Safe. So the verdict never contradicts the
// counts: Safe means no violation and no stale plain write in any trial.
// The result also says how many trials were unsafe and broken, and bounds
// the rate of such trials (Result.RateUpper, Result.RateLower). Each
// trial's seed derives from seed, the scenario's name and the trial's
// number, so one seed replays every trial of every scenario, whatever else
// runs, in whatever order or process.
func Run(ctx context.Context, cluster *Cluster, s Scenario, trials int, seed uint64, progress func(string)) (Result, error) {
	return run(ctx, cluster, s, nil, trials, seed, progress)
}

// RunMutant is Run against a mutant of the lock (see Mutant): every workload
// client is made that mutant. It runs up to trials trials and stops at the
// first whose verdict differs from the scenario's expected one: the mutant
// is caught (Result.Mismatch).
func RunMutant(ctx context.Context, cluster *Cluster, s Scenario, m Mutant, trials int, seed uint64, progress func(string)) (Result, error) {
	if m.NotCovered != "" {
		return Result{}, fmt.Errorf("chaos: mutant %s cannot run: %s", m.Name, m.NotCovered)
	}
	if err := m.check(); err != nil {
		return Result{}, err
	}
	return run(ctx, cluster, s, &m, trials, seed, progress)
}

func run(ctx context.Context, cluster *Cluster, s Scenario, m *Mutant, trials int, seed uint64, progress func(string)) (Result, error) {
	n := len(cluster.Nodes())
	res := Result{Scenario: s.Name, Backend: cluster.Backend(), Nodes: n, Clocks: cluster.Clocks(), FencedStore: cluster.fenced.Name(),
		Seed: seed, Expect: s.Expect, Why: s.Why}
	if m != nil {
		res.Mutant = m.Name
	}
	if s.Workload.Readers > 0 {
		res.FencedStore = rwFencedStore
	}
	if s.MinNodes > 0 && n < s.MinNodes {
		res.Skipped = fmt.Sprintf("needs at least %d nodes", s.MinNodes)
		return res, nil
	}
	if why := cluster.unsupportedClockFault(s); why != "" {
		res.Skipped = why
		return res, nil
	}
	return runTrials(ctx, res, s, m != nil, trials, seed, progress, func(res *Result, trial int, tseed uint64) (trialResult, error) {
		for attempt := 1; ; attempt++ {
			if err := prepare(ctx, cluster); err != nil {
				return trialResult{}, fmt.Errorf("chaos: before %s trial %d: %w", s.Name, trial+1, err)
			}
			tr, err := runTrial(ctx, cluster, s, m, tseed)
			if !errors.Is(err, errSetup) || attempt == setupAttempts || ctx.Err() != nil {
				return tr, err
			}
			// The same trial again, with the same seed.
			res.Notes = append(res.Notes, fmt.Sprintf("trial %d: set-up failed, run again: %v", trial+1, err))
		}
	})
}

// runTrials runs up to trials trials of s (more for a scenario expected
// unsafe, up to UnsafeTrialLimit), each with runOne, and adds up their
// verdicts into res. mutant says whether the clients are a mutant's: then the
// run stops at the first trial whose verdict is not the expected one, and
// liveness misses stay in the verdict.
func runTrials(ctx context.Context, res Result, s Scenario, mutant bool, trials int, seed uint64, progress func(string),
	runOne func(res *Result, trial int, tseed uint64) (trialResult, error)) (Result, error) {
	limit := trials
	if s.Expect == Unsafe {
		limit = max(trials, UnsafeTrialLimit)
	}
	var latencies []time.Duration
	verdicts := map[Verdict]int{}
	var firstMiss string // the first liveness miss, for the notes
	for trial := 0; trial < limit; trial++ {
		if trial >= trials && verdicts[Unsafe]+verdicts[Broken] > 0 {
			break
		}
		tseed := trialSeed(seed, s.Name, trial)
		tr, err := runOne(&res, trial, tseed)
		if errors.Is(err, errUnsupported) {
			res.Skipped = err.Error()
			return res, nil
		}
		if err != nil {
			return res, err
		}
		rep := tr.report
		res.addTrial(rep, tr.history)
		latencies = append(latencies, tr.latencies...)
		v, notes, missed := judge(s, rep, tr)
		if !mutant && len(notes) == 0 && len(missed) > 0 {
			// Only a liveness check failed: judge the trial's safety
			// alone, and leave a trial that took no lock out of the
			// counts (it tested nothing). A mutant is caught by these
			// checks, so RunMutant keeps them in the verdict.
			res.LivenessMisses++
			switch {
			case rep.Acquisitions == 0:
				res.IdleTrials++
				v = ""
			case rep.Violations > 0 || rep.StaleWritesPlain > 0:
				v = Unsafe
			default:
				v = Safe
			}
			if firstMiss == "" {
				firstMiss = fmt.Sprintf("trial %d: %s", trial+1, strings.Join(missed, "; "))
			}
			missed = nil
		}
		if v != "" {
			verdicts[v]++
		}
		caught := mutant && v != s.Expect
		for _, note := range append(append(notes, missed...), tr.info...) {
			res.Notes = append(res.Notes, fmt.Sprintf("trial %d: %s", trial+1, note))
		}
		if progress != nil {
			shown := string(v)
			if v == "" {
				shown = "no lock taken, not counted"
			}
			progress(fmt.Sprintf("%-26s trial %d/%d seed %d: %s (%s, %s, stale plain/fenced %d/%d)",
				s.Name, trial+1, trials, tseed, shown, count(rep.Acquisitions, "acquisition"), count(rep.Violations, "violation"),
				rep.StaleWritesPlain, rep.StaleWritesFenced))
		}
		if caught {
			break // a mutant is caught by one trial
		}
	}
	switch {
	case verdicts[Broken] > 0:
		res.Observed = Broken
	case res.LivenessMisses == res.Trials:
		// Not one trial passed the scenario's liveness check.
		res.Observed = Broken
	case verdicts[Unsafe] > 0:
		res.Observed = Unsafe
	default:
		res.Observed = Safe
	}
	if res.LivenessMisses > 0 {
		res.Notes = append(res.Notes, firstMiss)
		note := fmt.Sprintf("%d of %d trials missed the scenario's liveness check", res.LivenessMisses, res.Trials)
		if res.LivenessMisses == res.Trials {
			note += ": every trial did, so the verdict is broken"
		} else {
			note += " (a slow machine's usual failure: --time-scale stretches the timeouts) and were judged on their safety alone"
		}
		if res.IdleTrials > 0 {
			note += fmt.Sprintf("; %d of them took no lock and are not counted", res.IdleTrials)
		}
		res.Notes = append(res.Notes, note)
	}
	if s.Expect == Unsafe {
		switch {
		case verdicts[Unsafe] == 0:
			res.Notes = append(res.Notes, fmt.Sprintf("no violation in %d trials (the limit is %d)", res.Trials, limit))
		case res.Trials > trials || verdicts[Unsafe] < res.Exercised():
			res.Notes = append(res.Notes, fmt.Sprintf("unsafe in %d of %d trials", verdicts[Unsafe], res.Exercised()))
		}
	}
	res.UnsafeTrials, res.BrokenTrials = verdicts[Unsafe], verdicts[Broken]
	res.RateLower, res.RateUpper = RateBounds(res.NotSafe(), res.Exercised())
	res.P50, res.P99 = oracle.Percentile(latencies, 50), oracle.Percentile(latencies, 99)
	return res, nil
}

// prepareAttempts is how many times prepare tries to heal and wipe the
// cluster before it gives up: on a loaded machine a dial to a node can time
// out, and one slow dial must not end a run of hundreds of trials.
const prepareAttempts = 3

// prepare heals every node and wipes its data, trying up to
// prepareAttempts times, a second apart.
func prepare(ctx context.Context, cluster *Cluster) error {
	var err error
	for attempt := range prepareAttempts {
		if attempt > 0 {
			sleepCtx(ctx, time.Second)
			if ctx.Err() != nil {
				return errors.Join(err, ctx.Err())
			}
		}
		if err = cluster.HealAll(ctx); err != nil {
			err = fmt.Errorf("heal: %w", err)
			continue
		}
		if err = cluster.FlushAll(ctx); err != nil {
			err = fmt.Errorf("flush: %w", err)
			continue
		}
		return nil
	}
	return err
}

// count says "1 violation", "2 violations".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// commonestFailure names the reason most failed calls of the trial gave,
// as ` (the commonest failure, 12 of 40 calls: ...)`, or says that none
// failed before the trial ended (a call the trial's end cuts short is not
// recorded as failed): what a reader of a liveness failure needs first.
func commonestFailure(rep oracle.Report) string {
	reason, n, all := "", 0, 0
	for r, k := range rep.FailureReasons {
		all += k
		if k > n || (k == n && r < reason) {
			reason, n = r, k
		}
	}
	if all == 0 {
		return " (no call failed before the trial ended; calls the end cut short are not counted)"
	}
	return fmt.Sprintf(" (the commonest failure, %d of %d failed calls: %s)", n, all, reason)
}

// judge gives one trial's verdict and the reasons for a Broken one: the
// broken promises (notes) and, apart, the failed liveness checks (missed).
func judge(s Scenario, rep oracle.Report, tr trialResult) (v Verdict, notes, missed []string) {
	if rep.StaleWritesFenced > 0 && !s.FencingBreaks {
		notes = append(notes, fmt.Sprintf("%d stale writes accepted by the fenced resource", rep.StaleWritesFenced))
	}
	if rep.TokenOrderViolations > 0 && !s.FencingBreaks {
		notes = append(notes, fmt.Sprintf("%d fencing tokens out of acquisition order", rep.TokenOrderViolations))
	}
	if tr.expiredHandouts > 0 {
		notes = append(notes, fmt.Sprintf("%d locks handed out with no validity left", tr.expiredHandouts))
	}
	switch s.Availability {
	case Available:
		if rep.Acquisitions == 0 {
			missed = append(missed, "no acquisition succeeded, but the scenario expects some"+commonestFailure(rep))
		}
	case Unavailable:
		if rep.Acquisitions > 0 {
			notes = append(notes, fmt.Sprintf("%d acquisitions succeeded, but none may", rep.Acquisitions))
		}
	}
	for reason := range rep.FailureReasons {
		if strings.Contains(reason, redlock.ErrInvalidArgument.Error()) {
			notes = append(notes, "the library refused the scenario's own settings: "+reason)
			break
		}
	}
	for _, c := range s.MustAcquire {
		if !slices.ContainsFunc(tr.history.Holds, func(h oracle.HoldRecord) bool { return h.Client == c }) {
			missed = append(missed, fmt.Sprintf("client %d never took the lock, but the scenario expects it to", c))
		}
	}
	if s.Extends && rep.ExtendedHolds == 0 {
		missed = append(missed, "no hold was ever extended, but the scenario holds the lock past its TTL")
	}
	if s.NoneBefore > 0 {
		for _, h := range tr.history.Holds {
			if h.Acquired < s.NoneBefore {
				notes = append(notes, fmt.Sprintf("a lock was acquired at %v, before the majority was reachable (%v)", h.Acquired.Round(time.Millisecond), s.NoneBefore))
				break
			}
		}
	}
	if tr.keysLeft > 0 {
		notes = append(notes, fmt.Sprintf("a released lock (Release returned nil) was still held on %d of %d nodes", tr.keysLeft, tr.nodes))
	}
	if len(tr.notes) > 0 {
		notes = append(notes, tr.notes...)
	}
	switch {
	case len(notes)+len(missed) > 0:
		return Broken, notes, missed
	case rep.Violations > 0 || rep.StaleWritesPlain > 0:
		return Unsafe, nil, nil
	}
	return Safe, nil, nil
}

// errSetup marks a trial whose set-up (the clients' warm-up on the key,
// the key's deletion) failed the way a loaded machine makes it fail: the
// warm-up took no lock in its time, or a dial or call timed out. Run tries
// the trial again, up to setupAttempts times in all, before it gives up.
var errSetup = errors.New("set-up of the trial failed")

// setupAttempts is how many times Run tries a trial whose set-up failed.
const setupAttempts = 3

// setupError marks err with errSetup when it is such a failure.
func setupError(err error) error {
	var netErr net.Error
	if errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &netErr) && netErr.Timeout()) {
		return fmt.Errorf("%w: %w", errSetup, err)
	}
	return err
}

// errUnsupported marks a fault the backend cannot produce.
var errUnsupported = errors.New("unsupported on this backend")

type trialResult struct {
	report          oracle.Report
	history         oracle.History
	latencies       []time.Duration
	expiredHandouts int
	keysLeft        int // nodes holding the lock key after the workload (KeysReleased)
	nodes           int
	notes           []string // other broken promises
	info            []string // remarks that do not change the verdict
}

// clientProxies returns, when some fault of s names clients, a proxy per
// workload client and node (in front of the node's own proxy), and the
// addresses each client dials.
func clientProxies(cluster *Cluster, s Scenario) ([][]*Proxy, [][]string, error) {
	nodes := cluster.Nodes()
	addrs := make([][]string, s.Workload.Clients)
	perClient := false
	for _, f := range s.Faults {
		perClient = perClient || len(f.Clients) > 0
	}
	if !perClient {
		for i := range addrs {
			addrs[i] = cluster.Addrs()
		}
		return nil, addrs, nil
	}
	proxies := make([][]*Proxy, s.Workload.Clients)
	for i := range proxies {
		for _, n := range nodes {
			p, err := NewProxy(n.Addr())
			if err != nil {
				closeProxies(proxies)
				return nil, nil, err
			}
			proxies[i] = append(proxies[i], p)
			addrs[i] = append(addrs[i], p.Addr())
		}
	}
	return proxies, addrs, nil
}

func closeProxies(proxies [][]*Proxy) {
	for _, ps := range proxies {
		for _, p := range ps {
			_ = p.Close()
		}
	}
}

// runTrial runs one trial of s, with the mutant m unless it is nil.
func runTrial(ctx context.Context, cluster *Cluster, s Scenario, m *Mutant, seed uint64) (trialResult, error) {
	if s.Workload.Readers > 0 {
		return runRWTrial(ctx, cluster, s, m, seed)
	}
	if s.Workload.Permits > 0 {
		return runSemaphoreTrial(ctx, cluster, s, m, seed)
	}
	if s.ElapsedSubtracted && len(s.validityCaps(len(cluster.Nodes()))) == 0 {
		return trialResult{}, fmt.Errorf("chaos: %s checks the elapsed time, but no fault delays a client's replies on a majority from the start", s.Name)
	}
	proxies, addrs, err := clientProxies(cluster, s)
	if err != nil {
		return trialResult{}, err
	}
	defer closeProxies(proxies)
	clients, err := s.Workload.connect(ctx, addrs, m)
	if err != nil {
		return trialResult{}, setupError(err)
	}
	defer closeClients(clients)
	if err := cluster.deleteKey(ctx, s.Workload.key()); err != nil {
		return trialResult{}, setupError(err)
	}
	res, err := cluster.trialResources(ctx)
	if err != nil {
		return trialResult{}, err
	}
	o := oracle.NewOracle()
	if !s.Workload.NoFencing {
		o.ExpectTokens()
	}
	o.Declare(s.Workload.Clients, len(cluster.Nodes()))
	inj := newInjector(cluster, o, seed)
	inj.clientProxies = proxies
	inj.key = s.Workload.key()
	tctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()

	triggered, err := inj.scheduleFaults(tctx, s.Faults)
	if err != nil {
		return trialResult{}, err
	}
	checks := newHandoutChecks(s, len(cluster.Nodes()))
	stats := s.Workload.run(tctx, clients, o, res, seed, func(a acquisition) {
		checks.record(a)
		inj.trigger(tctx, triggered, a)
	})
	cancel()
	inj.stop()
	if err := errors.Join(inj.firstErr(), res.err()); err != nil {
		return trialResult{}, err
	}
	return judgeTrial(ctx, cluster, s, o, checks, stats)
}

// judgeTrial gathers what a finished trial showed: the oracle's report and
// history, the hand-out checks, extensions of released locks, the keys
// released locks left behind (KeysReleased), and porcupine's second opinion
// on the fenced writes.
func judgeTrial(ctx context.Context, cluster *Cluster, s Scenario, o *oracle.Oracle, checks *handoutChecks, stats *workloadStats) (trialResult, error) {
	tr := trialResult{report: o.Report(), history: o.History(), expiredHandouts: checks.expired, nodes: len(cluster.Nodes())}
	tr.notes = append(tr.notes, checks.tooValid...)
	if stats.revived > 0 {
		tr.notes = append(tr.notes, fmt.Sprintf("%d extensions of a released lock succeeded", stats.revived))
	}
	if s.KeysReleased {
		// A Release that returned nil promised that a majority no longer
		// holds the key for that owner. (A release that failed, or a
		// failed attempt's SET that ran late, may leave keys: not this.)
		left, err := cluster.ownersLeft(ctx, s.Workload.key(), stats.released)
		if err != nil {
			return trialResult{}, fmt.Errorf("chaos: keys after %s: %w", s.Name, err)
		}
		if left >= tr.nodes/2+1 {
			tr.keysLeft = left
		}
	}
	note, err := crossCheck(tr.history, tr.report.StaleWritesFenced)
	if err != nil {
		return trialResult{}, fmt.Errorf("%s: %w", s.Name, err)
	}
	if note != "" {
		tr.info = append(tr.info, note)
	}
	tr.info = append(tr.info, tokenOrderNotes(tr.history)...)
	tr.finish(s)
	return tr, nil
}

// finish adds what every judged trial of s carries: the clients' notes,
// when a scenario expected safe was not, and the acquire latencies.
func (tr *trialResult) finish(s Scenario) {
	if s.Expect == Safe && tr.report.Violations > 0 {
		// A surprise: what the clients noted, and when, goes with the
		// trial's verdict (for an exec job: when its group was sent
		// SIGTERM and SIGKILL, and when its exit was seen).
		for _, n := range tr.history.Notes {
			tr.info = append(tr.info, fmt.Sprintf("at %.1f ms: %s", n.AtMS, n.Text))
		}
	}
	for _, h := range tr.history.Holds {
		tr.latencies = append(tr.latencies, h.Latency)
	}
}

// handoutChecks looks at every lock as the workload gets it: one handed out
// with no validity left is a broken promise, and so, when the scenario checks
// ElapsedSubtracted, is one with more validity than its client's cap (see
// validityCaps).
type handoutChecks struct {
	caps map[int]time.Duration

	mu       sync.Mutex
	expired  int
	tooValid []string
}

func newHandoutChecks(s Scenario, nodes int) *handoutChecks {
	c := &handoutChecks{}
	if s.ElapsedSubtracted {
		c.caps = s.validityCaps(nodes)
	}
	return c
}

func (c *handoutChecks) record(a acquisition) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !a.Lock.AcquiredAt().Before(a.Lock.ValidUntil()) {
		c.expired++
	}
	if limit, ok := c.caps[a.Client]; ok {
		if v := a.Lock.ValidUntil().Sub(a.Lock.AcquiredAt()); v > limit {
			c.tooValid = append(c.tooValid, fmt.Sprintf("client %d was granted %v of validity, more than TTL − reply delay − drift = %v: the time the acquisition took was not subtracted",
				a.Client, v.Round(time.Millisecond), limit))
		}
	}
}
