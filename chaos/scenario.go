package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/faultlog"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// Verdict is a scenario's safety outcome.
type Verdict string

// The verdicts. Safe: no two holders overlapped and no stale write was
// accepted, even by the unfenced resource. Unsafe: mutual exclusion was
// violated (an overlap, or a stale write the plain resource accepted), a
// known limit of Redlock that the scenario documents. Broken: something the
// library promises failed — a stale write accepted by the fenced resource,
// fencing tokens out of order, or a check of the scenario (such as "no lock
// may be acquired") failed.
const (
	Safe   Verdict = "safe"
	Unsafe Verdict = "unsafe"
	Broken Verdict = "broken"
)

// Action is a fault applied to nodes.
type Action string

// The fault actions. Each maps to a verb on Node.
const (
	Kill           Action = "kill"            // Node.Kill
	Restart        Action = "restart"         // Node.Restart (keeps data)
	Amnesia        Action = "restart-amnesia" // Node.RestartAmnesia (data lost)
	PauseNode      Action = "pause"           // Node.Pause(Amount)
	DelayRequests  Action = "delay-requests"  // Node.DelayRequests(Amount)
	DelayReplies   Action = "delay-replies"   // Node.DelayReplies(Amount)
	DropRequests   Action = "drop-requests"   // Node.DropRequests(true)
	DropReplies    Action = "drop-replies"    // Node.DropReplies(true)
	Partition      Action = "partition"       // Node.Partition(true)
	JumpClock      Action = "jump-clock"      // Node.JumpClock(Amount)
	ClockRate      Action = "clock-rate"      // Node.SetClockRate(Rate)
	HealNetworkAct Action = "heal-network"    // Node.HealNetwork
)

// Pick says how a fault chooses its nodes.
type Pick string

// The ways to pick nodes. Random picks are drawn from the trial's seeded
// generator, so the same seed gives the same schedule of faults.
const (
	PickFixed          Pick = "fixed"           // NodeSet.Nodes
	PickRandomMinority Pick = "random-minority" // N − (N/2+1) nodes at random
	PickRandomMajority Pick = "random-majority" // N/2+1 nodes at random
	PickRandom         Pick = "random"          // NodeSet.Count nodes at random
	PickMinorityTail   Pick = "minority-tail"   // the last N − (N/2+1) nodes
	PickGranted        Pick = "granted"         // NodeSet.Count of the nodes that granted the triggering acquisition
	// PickOverlap picks nodes 0 .. 2q−N−1 (q = N/2+1): the fewest nodes
	// two quorums share. While the minority tail is cut off, a holder's
	// quorum is nodes 0 .. q−1; if these nodes lose its key, they and the
	// tail form a second quorum. That is 1 node for odd N and 2 for even N.
	PickOverlap Pick = "overlap"
)

// NodeSet selects the nodes a fault applies to.
type NodeSet struct {
	Pick  Pick  `json:"pick"`
	Nodes []int `json:"nodes,omitempty"`
	Count int   `json:"count,omitempty"`
}

// Fault is one scheduled fault: at a time from the trial's start, or right
// after an acquisition in the workload (On), on a set of nodes, undone after
// For (0 = left until the trial ends; the cluster is healed between trials).
// A network fault with Clients applies only to those workload clients'
// connections (an asymmetric partition: the other clients still reach the
// nodes); each client then reaches each node through a proxy of its own.
type Fault struct {
	At      time.Duration `json:"at,omitempty"`
	On      *Trigger      `json:"on,omitempty"`
	Nodes   NodeSet       `json:"nodes"`
	Clients []int         `json:"clients,omitempty"`
	Action  Action        `json:"action"`
	Amount  time.Duration `json:"amount,omitempty"` // pause length, delay, clock jump
	Rate    float64       `json:"rate,omitempty"`   // clock rate for ClockRate
	For     time.Duration `json:"for,omitempty"`
}

// Availability is what a scenario expects of acquisitions.
type Availability string

// The availability expectations.
const (
	AnyAvailability Availability = ""     // no expectation
	Available       Availability = "some" // at least one acquisition per trial
	Unavailable     Availability = "none" // no acquisition may succeed
)

// Scenario is one failure mode as data: a workload, a fault schedule, and the
// verdict we expect with the reason.
type Scenario struct {
	Name     string        `json:"name"`
	Summary  string        `json:"summary"`
	Expect   Verdict       `json:"expect"`
	Why      string        `json:"why"`
	Workload Workload      `json:"-"`
	Faults   []Fault       `json:"faults"`
	Duration time.Duration `json:"duration"` // length of one trial
	// Availability is checked per trial: an acquisition where none may
	// succeed makes the verdict Broken; no acquisition where some are
	// expected is a liveness miss (see Result.LivenessMisses).
	Availability Availability `json:"availability,omitempty"`
	// MinNodes is the smallest cluster the scenario makes sense on.
	MinNodes int `json:"min_nodes,omitempty"`
	// FencingBreaks marks a scenario outside fencing's own guarantee (for
	// example a node that re-creates a lost counter after its clock stepped
	// back by more than the retention, docs/fencing.md, assumption C):
	// fenced stale writes and token order are reported but do not make the
	// verdict Broken. No built-in scenario needs it: a node that merely lost
	// its data re-creates its counter from its clock, above earlier tokens.
	FencingBreaks bool `json:"fencing_breaks,omitempty"`
	// Fixed scenarios are not stretched by Scaled: their margins are
	// absolute.
	Fixed bool `json:"fixed,omitempty"`
	// ElapsedSubtracted checks that the validity time counts from before
	// the first request: every lock taken by a client whose replies a fault
	// delays (from the trial's start, on a majority of the nodes) must have
	// had at most TTL − delay − Drift(TTL) of validity when it was
	// acquired, since its quorum includes at least one delayed reply; else
	// the verdict is Broken.
	ElapsedSubtracted bool `json:"elapsed_subtracted,omitempty"`
	// Extends requires at least one hold per trial to be extended (by
	// Extend, KeepAlive or Do), else the trial misses a liveness check
	// (see Result.LivenessMisses).
	Extends bool `json:"extends,omitempty"`
	// KeysReleased checks, after the trial, that no lock whose Release
	// returned nil is still held on a majority of nodes, else the verdict
	// is Broken.
	KeysReleased bool `json:"keys_released,omitempty"`
	// NoneBefore: no acquisition may succeed before this offset from the
	// trial's start, else the verdict is Broken.
	NoneBefore time.Duration `json:"none_before,omitempty"`
}

// Report is the judge's verdict on one trial: acquisitions, overlapping
// holds (mutual-exclusion violations), stale writes each resource accepted,
// fencing tokens out of order, acquire latency. Result.Reports has one per
// trial; the definitions are in the harness's oracle (internal/oracle).
type Report = oracle.Report

// History is everything one trial recorded (holds, writes, node faults,
// notes) with the judge's findings filled in, as WriteSVG draws it.
// Result.Histories has one per trial.
type History = oracle.History

// Result is the outcome of running one scenario for some trials.
type Result struct {
	Scenario     string        `json:"scenario"`
	Backend      Backend       `json:"backend"`
	Nodes        int           `json:"nodes"`
	Clocks       string        `json:"clocks"`       // how node clocks move: Cluster.Clocks
	FencedStore  string        `json:"fenced_store"` // the fenced resource: FencedStore.Name
	Trials       int           `json:"trials"`
	Seed         uint64        `json:"seed,string"`
	Mutant       string        `json:"mutant,omitempty"`
	Expect       Verdict       `json:"expect"`
	Observed     Verdict       `json:"observed"`
	Why          string        `json:"why"`
	Notes        []string      `json:"notes,omitempty"`
	Skipped      string        `json:"skipped,omitempty"`
	Acquisitions int           `json:"acquisitions"`
	Failed       int           `json:"failed_acquires"`
	Violations   int           `json:"violations"`
	StalePlain   int           `json:"stale_writes_plain"`
	StaleFenced  int           `json:"stale_writes_fenced"`
	TokenOrder   int           `json:"token_order_violations"`
	P50          time.Duration `json:"p50_acquire_ns"`
	P99          time.Duration `json:"p99_acquire_ns"`
	// UnsafeTrials and BrokenTrials count the trials judged unsafe and
	// broken; the others were safe or idle.
	UnsafeTrials int `json:"unsafe_trials"`
	BrokenTrials int `json:"broken_trials"`
	// LivenessMisses counts the trials (of Run, not RunMutant) whose only
	// failure was a liveness check of the scenario: no lock taken where
	// the scenario expects some (Available), or no hold extended where it
	// expects one (Extends). Such a trial is judged on its safety alone;
	// IdleTrials, those of them that took no lock, tested nothing and are
	// left out of NotSafe and the bounds. If every trial missed, the
	// verdict is Broken.
	LivenessMisses int `json:"liveness_misses"`
	IdleTrials     int `json:"idle_trials"`
	// RateLower and RateUpper bound the rate of trials that are not safe
	// (unsafe or broken), from NotSafe() of Exercised(): each is an exact
	// one-sided bound at Confidence (RateBounds). For a scenario expected
	// safe, RateUpper is what the run shows (0 in 300 trials: below
	// 1 %); for one expected unsafe, RateLower is (how often, at least, the
	// failure shows).
	RateLower float64   `json:"not_safe_rate_lower95"`
	RateUpper float64   `json:"not_safe_rate_upper95"`
	Reports   []Report  `json:"trials_detail"`
	Histories []History `json:"-"`
}

// NotSafe returns the number of trials that were not safe: unsafe or
// broken.
func (r Result) NotSafe() int { return r.UnsafeTrials + r.BrokenTrials }

// Exercised returns the number of trials that count: those run, less the
// idle ones (IdleTrials).
func (r Result) Exercised() int { return r.Trials - r.IdleTrials }

// Match reports whether the scenario ran and its observed verdict is the
// expected one. A skipped scenario does not match (nor mismatch: see
// Mismatch).
func (r Result) Match() bool { return r.Skipped == "" && r.Observed == r.Expect }

// Mismatch reports whether the scenario ran and its observed verdict differs
// from the expected one.
func (r Result) Mismatch() bool { return r.Skipped == "" && r.Observed != r.Expect }

// UnsafeTrialLimit bounds the trials Run makes of a scenario expected to be
// unsafe that has not shown its violation yet: it runs more trials than
// asked, up to this many in all, before it reports the scenario safe.
const UnsafeTrialLimit = 8

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
	if s.MinNodes > 0 && n < s.MinNodes {
		res.Skipped = fmt.Sprintf("needs at least %d nodes", s.MinNodes)
		return res, nil
	}
	if why := cluster.unsupportedClockFault(s); why != "" {
		res.Skipped = why
		return res, nil
	}
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
		var tr trialResult
		var err error
		for attempt := 1; ; attempt++ {
			if err := prepare(ctx, cluster); err != nil {
				return res, fmt.Errorf("chaos: before %s trial %d: %w", s.Name, trial+1, err)
			}
			tr, err = runTrial(ctx, cluster, s, m, tseed)
			if !errors.Is(err, errSetup) || attempt == setupAttempts || ctx.Err() != nil {
				break
			}
			// The same trial again, with the same seed.
			res.Notes = append(res.Notes, fmt.Sprintf("trial %d: set-up failed, run again: %v", trial+1, err))
		}
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
		if m == nil && len(notes) == 0 && len(missed) > 0 {
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
		caught := m != nil && v != s.Expect
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

// addTrial adds one trial's report and history to r's totals.
func (r *Result) addTrial(rep Report, h History) {
	r.Trials++
	r.Reports = append(r.Reports, rep)
	r.Histories = append(r.Histories, h)
	r.Acquisitions += rep.Acquisitions
	r.Failed += rep.FailedAcquires
	r.Violations += rep.Violations
	r.StalePlain += rep.StaleWritesPlain
	r.StaleFenced += rep.StaleWritesFenced
	r.TokenOrder += rep.TokenOrderViolations
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
func commonestFailure(rep Report) string {
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
func judge(s Scenario, rep Report, tr trialResult) (v Verdict, notes, missed []string) {
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

// validityCaps returns, for each client whose replies a fault delays from
// the trial's start on a majority of the n nodes (every client when the
// fault names none), the most validity a lock
// it acquires may have: TTL − delay − Drift(TTL). Such a client's quorum
// includes a delayed reply, so its acquisition took at least the delay, and
// the validity counts from before the first request.
func (s Scenario) validityCaps(n int) map[int]time.Duration {
	w := s.Workload
	factor := w.DriftFactor
	if factor <= 0 {
		factor = redlock.DefaultDriftFactor
	}
	caps := map[int]time.Duration{}
	for _, f := range s.Faults {
		if f.Action != DelayReplies || f.On != nil || f.At != 0 || f.For != 0 || !f.Nodes.majority(n) {
			continue
		}
		limit := w.TTL - f.Amount - redlock.Drift(w.TTL, factor)
		clients := f.Clients
		if len(clients) == 0 { // the nodes' own proxies: every client
			for c := range w.Clients {
				clients = append(clients, c)
			}
		}
		for _, c := range clients {
			if old, ok := caps[c]; !ok || limit < old {
				caps[c] = limit
			}
		}
	}
	return caps
}

// majority reports whether ns always picks a majority of n nodes.
func (ns NodeSet) majority(n int) bool {
	switch ns.Pick {
	case PickRandomMajority:
		return true
	case PickFixed:
		return len(ns.Nodes) >= n/2+1
	case PickRandom:
		return ns.Count >= n/2+1
	}
	return false
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
	report          Report
	history         History
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
	return tr, nil
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

// injector applies faults during one trial and records them in the oracle.
type injector struct {
	cluster *Cluster
	oracle  *oracle.Oracle
	log     *faultlog.Log // the schedule, and the bands in force

	// clientProxies[c][n] is client c's own proxy to node n, when the
	// scenario has per-client faults.
	clientProxies [][]*Proxy

	mu  sync.Mutex
	rng *rand.Rand
	err error
}

func newInjector(cluster *Cluster, o *oracle.Oracle, seed uint64) *injector {
	return &injector{cluster: cluster, oracle: o, log: faultlog.New(o), rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// scheduleFaults puts the faults at time zero in place before any client
// starts, and the timed ones on timers; it returns the faults triggered by
// workload events, for trigger. If a fault at time zero fails, it stops the
// injector and returns the error.
func (inj *injector) scheduleFaults(ctx context.Context, faults []Fault) (triggered []Fault, err error) {
	var timed []Fault
	for _, f := range faults {
		switch {
		case f.On != nil:
			triggered = append(triggered, f)
		case f.At == 0:
			if err := inj.apply(ctx, f, nil); err != nil {
				inj.stop()
				return nil, err
			}
		default:
			timed = append(timed, f)
		}
	}
	for _, f := range timed {
		inj.schedule(ctx, f.At, func() { inj.applyLogged(ctx, f, nil) })
	}
	return triggered, nil
}

// trigger applies the faults among triggered that fire on acquisition a.
func (inj *injector) trigger(ctx context.Context, triggered []Fault, a acquisition) {
	for _, f := range triggered {
		if f.On.Client == a.Client && f.On.Nth == a.Nth {
			inj.applyLogged(ctx, f, a.Lock.Nodes())
		}
	}
}

func (inj *injector) firstErr() error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return inj.err
}

func (inj *injector) fail(err error) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	if inj.err == nil {
		inj.err = err
	}
}

// schedule runs fn after d unless the trial ended first; stop cancels it or
// waits for it.
func (inj *injector) schedule(ctx context.Context, d time.Duration, fn func()) {
	inj.log.After(ctx, d, fn)
}

func (inj *injector) applyLogged(ctx context.Context, f Fault, granted []redlock.NodeResult) {
	if err := inj.apply(ctx, f, granted); err != nil && ctx.Err() == nil {
		inj.fail(err)
	}
}

// stop cancels pending timers, waits for running ones, and closes the
// fault bands still open.
func (inj *injector) stop() { inj.log.Stop() }

// pick resolves a NodeSet to node indices.
func (inj *injector) pick(ns NodeSet, granted []redlock.NodeResult) []int {
	n := len(inj.cluster.Nodes())
	minority := n - (n/2 + 1)
	random := func(k int) []int {
		inj.mu.Lock()
		perm := inj.rng.Perm(n)
		inj.mu.Unlock()
		out := perm[:min(k, n)]
		slices.Sort(out)
		return out
	}
	switch ns.Pick {
	case PickFixed:
		return ns.Nodes
	case PickRandomMinority:
		return random(minority)
	case PickRandomMajority:
		return random(n/2 + 1)
	case PickRandom:
		return random(ns.Count)
	case PickOverlap:
		out := make([]int, 0, 2)
		for i := range 2*(n/2+1) - n {
			out = append(out, i)
		}
		return out
	case PickMinorityTail:
		out := make([]int, 0, minority)
		for i := n - minority; i < n; i++ {
			out = append(out, i)
		}
		return out
	case PickGranted:
		var out []int
		for i, g := range granted {
			if g.Outcome == redlock.OutcomeGranted && len(out) < max(ns.Count, 1) {
				out = append(out, i)
			}
		}
		return out
	}
	return nil
}

// apply applies one fault to its nodes now, and schedules its undoing.
func (inj *injector) apply(ctx context.Context, f Fault, granted []redlock.NodeResult) error {
	for _, i := range inj.pick(f.Nodes, granted) {
		if i < 0 || i >= len(inj.cluster.Nodes()) {
			return fmt.Errorf("chaos: fault %s names node %d of %d", f.Action, i, len(inj.cluster.Nodes()))
		}
		var err error
		if len(f.Clients) > 0 {
			err = inj.applyToClients(ctx, f, i)
		} else {
			err = inj.applyToNode(ctx, f, i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyToNode applies f to node i now, records it in the oracle, and
// schedules its undoing after f.For.
func (inj *injector) applyToNode(ctx context.Context, f Fault, i int) error {
	node := inj.cluster.Node(i)
	now := time.Now()
	label := string(f.Action)
	var err error
	band := true // the fault lasts until undone or the trial ends
	switch f.Action {
	case Kill:
		err = node.Kill()
		label = "killed"
	case Restart:
		err = node.Restart(ctx)
		if errors.Is(err, ErrNeedsPersistence) {
			// Without persistence a real server cannot come back with
			// its data; for reviving a killed node that is the same.
			err = node.RestartAmnesia(ctx)
		}
		inj.closeBand(i, "killed", now)
		band = false
	case Amnesia:
		err = node.RestartAmnesia(ctx)
		inj.closeBand(i, "killed", now)
		label, band = "amnesia", false
	case PauseNode:
		err = node.Pause(f.Amount)
		label = "paused"
		inj.oracle.Fault(i, label, now, now.Add(f.Amount))
		band = false
	case DelayRequests, DelayReplies, DropRequests, DropReplies:
		label = applyTraffic(node, f)
	case Partition:
		node.Partition(true)
		label = "partitioned"
	case HealNetworkAct:
		node.HealNetwork()
		inj.closeNetworkBands(i, now)
		band = false
	case JumpClock:
		err = node.JumpClock(f.Amount)
		label, band = clockStepLabel(f.Amount), false
	case ClockRate:
		err = node.SetClockRate(f.Rate)
		label = fmt.Sprintf("clock ×%g", f.Rate)
	default:
		return fmt.Errorf("chaos: unknown fault action %q", f.Action)
	}
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return fmt.Errorf("%w: %s on node %d: %v", errUnsupported, f.Action, i, err)
		}
		return fmt.Errorf("chaos: %s on node %d: %w", f.Action, i, err)
	}
	if band {
		network := f.Action != Kill && f.Action != ClockRate
		inj.log.Open(faultlog.Band{Node: i, What: label, Network: network}, now)
	} else if f.Action != PauseNode && f.Action != HealNetworkAct && f.Action != Restart {
		inj.oracle.Fault(i, label, now, now)
	}
	if f.For > 0 && band {
		inj.scheduleUndo(ctx, f, i, label)
	}
	return nil
}

// scheduleUndo undoes f on node i after f.For, closing its band labelled
// label: a killed node is restarted (with its data where it can be), a clock
// rate goes back to 1, a network fault is healed.
func (inj *injector) scheduleUndo(ctx context.Context, f Fault, i int, label string) {
	undo := f
	undo.For = 0
	switch f.Action {
	case Kill:
		undo.Action = Restart
	case ClockRate:
		undo.Rate = 1
	default:
		undo.Action = HealNetworkAct
	}
	undo.Nodes = NodeSet{Pick: PickFixed, Nodes: []int{i}}
	inj.schedule(ctx, f.For, func() {
		inj.closeBand(i, label, time.Now())
		inj.applyLogged(ctx, undo, nil)
	})
}

// trafficTarget is what a traffic fault acts on: a node (its proxy, for
// every client) or one client's own proxy to a node.
type trafficTarget interface {
	DelayRequests(time.Duration)
	DelayReplies(time.Duration)
	DropRequests(bool)
	DropReplies(bool)
}

// applyTraffic applies f, a delay or loss of requests or replies, to t and
// returns the label of its fault band.
func applyTraffic(t trafficTarget, f Fault) string {
	switch f.Action {
	case DelayRequests:
		t.DelayRequests(f.Amount)
		return "requests +" + f.Amount.String()
	case DelayReplies:
		t.DelayReplies(f.Amount)
		return "replies +" + f.Amount.String()
	case DropRequests:
		t.DropRequests(true)
		return "requests lost"
	default: // DropReplies: callers pass only these four actions
		t.DropReplies(true)
		return "replies lost"
	}
}

// applyToClients applies a network fault to node i as f.Clients reach it
// (their own proxies), and schedules its undoing after f.For.
func (inj *injector) applyToClients(ctx context.Context, f Fault, i int) error {
	now := time.Now()
	for _, c := range f.Clients {
		if c < 0 || c >= len(inj.clientProxies) {
			return fmt.Errorf("chaos: fault %s names client %d of %d", f.Action, c, len(inj.clientProxies))
		}
		p := inj.clientProxies[c][i]
		var label string
		switch f.Action {
		case DelayRequests, DelayReplies, DropRequests, DropReplies:
			label = applyTraffic(p, f)
		case Partition:
			p.DropRequests(true)
			p.DropReplies(true)
			label = "partitioned"
		case HealNetworkAct:
			p.Heal()
			inj.closeNetworkBands(i, now)
			continue
		default:
			return fmt.Errorf("chaos: fault %s cannot be limited to some clients (only network faults can)", f.Action)
		}
		label = fmt.Sprintf("%s for client %d", label, c)
		inj.log.Open(faultlog.Band{Node: i, What: label, Network: true}, now)
		if f.For > 0 {
			lbl := label
			inj.schedule(ctx, f.For, func() {
				p.Heal()
				inj.closeBand(i, lbl, time.Now())
			})
		}
	}
	return nil
}

// closeNetworkBands closes node's open network-fault bands (HealNetwork
// clears them all at once).
func (inj *injector) closeNetworkBands(node int, at time.Time) {
	inj.log.Close(at, func(b faultlog.Band) bool { return b.Node == node && b.Network })
}

// closeBand closes node's open band labelled what.
func (inj *injector) closeBand(node int, what string, at time.Time) {
	inj.log.Close(at, func(b faultlog.Band) bool { return b.Node == node && b.What == what })
}
