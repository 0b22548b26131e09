package chaos

import (
	"encoding/json"
	"time"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// Report is the judge's count of one trial: acquisitions, overlapping holds
// (mutual-exclusion violations), stale writes each resource accepted, and
// fencing tokens out of holder order. Result.Reports has one per trial. Its
// JSON form (`redlock chaos --json`) carries every detail the judge recorded
// (failure reasons, each violation, per-resource counts, acquire and call
// latencies), which these fields sum up.
type Report struct {
	Acquisitions   int // successful acquisitions
	FailedAcquires int // Acquire calls that failed before the trial ended
	// Violations counts pairs of clients whose holds overlapped, a paused
	// holder's late write counting as still holding.
	Violations int
	// BelievedViolations counts the violations in which both holders
	// believed they held the lock (not only a write after a belief ended).
	BelievedViolations   int
	StaleWritesPlain     int // stale writes the plain resource accepted
	StaleWritesFenced    int // stale writes the fenced resource accepted
	RejectedWritesFenced int // writes the fenced resource refused
	FencedWrites         int // writes that reached the fenced resource
	TokenOrderViolations int // holds whose token was not above the previous holder's
	ExtendedHolds        int // holds extended at least once
	Faults               int // faults applied to nodes

	detail oracle.Report
}

// newReport sums up the oracle's report of one trial.
func newReport(r oracle.Report) Report {
	return Report{
		Acquisitions: r.Acquisitions, FailedAcquires: r.FailedAcquires, Violations: r.Violations, BelievedViolations: r.BelievedViolations,
		StaleWritesPlain: r.StaleWritesPlain, StaleWritesFenced: r.StaleWritesFenced,
		RejectedWritesFenced: r.RejectedWritesFenced, FencedWrites: r.Resources[oracle.ResourceFenced].Writes,
		TokenOrderViolations: r.TokenOrderViolations, ExtendedHolds: r.ExtendedHolds, Faults: r.Faults,
		detail: r,
	}
}

// MarshalJSON writes every detail of the judge's report, not only the
// fields of r.
func (r Report) MarshalJSON() ([]byte, error) { return json.Marshal(r.detail) }

// History is everything one trial recorded (holds, writes, node faults,
// notes) with the judge's findings filled in. Result.Histories has one per
// trial; WriteSVG draws it.
type History struct {
	h oracle.History
}

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

// addTrial adds one trial's report and history to r's totals.
func (r *Result) addTrial(rep oracle.Report, h oracle.History) {
	r.Trials++
	r.Reports = append(r.Reports, newReport(rep))
	r.Histories = append(r.Histories, History{h: h})
	r.Acquisitions += rep.Acquisitions
	r.Failed += rep.FailedAcquires
	r.Violations += rep.Violations
	r.StalePlain += rep.StaleWritesPlain
	r.StaleFenced += rep.StaleWritesFenced
	r.TokenOrder += rep.TokenOrderViolations
}
