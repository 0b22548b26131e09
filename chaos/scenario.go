package chaos

import (
	"time"

	"github.com/d3b93e30/redlock"
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

// The fault actions: each is Action followed by the name of the fault, and its
// value (as JSON shows it) is that name in kebab case. Each maps to a verb on
// Node.
const (
	ActionKill           Action = "kill"            // Node.Kill
	ActionRestart        Action = "restart"         // Node.Restart (keeps data)
	ActionRestartAmnesia Action = "restart-amnesia" // Node.RestartAmnesia (data lost)
	ActionPause          Action = "pause"           // Node.Pause(Amount)
	ActionDelayRequests  Action = "delay-requests"  // Node.DelayRequests(Amount)
	ActionDelayReplies   Action = "delay-replies"   // Node.DelayReplies(Amount)
	ActionDropRequests   Action = "drop-requests"   // Node.DropRequests(true)
	ActionDropReplies    Action = "drop-replies"    // Node.DropReplies(true)
	ActionPartition      Action = "partition"       // Node.Partition(true)
	ActionJumpClock      Action = "jump-clock"      // Node.JumpClock(Amount)
	ActionClockRate      Action = "clock-rate"      // Node.SetClockRate(Rate)
	ActionHealNetwork    Action = "heal-network"    // Node.HealNetwork
	ActionFlush          Action = "flush"           // Node.Flush (FLUSHALL)
	ActionEvictKey       Action = "evict-key"       // Node.EvictKey of the workload's key
	ActionReplace        Action = "replace"         // Node.Replace (a fresh server)
	ActionSnapshot       Action = "snapshot"        // Node.Snapshot
	ActionRestartStale   Action = "restart-stale"   // Node.RestartFromSnapshot (writes since lost)
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
	PickMinorityHead   Pick = "minority-head"   // the first N − (N/2+1) nodes
	PickGranted        Pick = "granted"         // NodeSet.Count of the nodes that granted the triggering acquisition
	// PickOverlap picks nodes 0 .. 2q−N−1 (q = N/2+1): the fewest nodes
	// two quorums share. While the minority tail is cut off, a holder's
	// quorum is nodes 0 .. q−1; if these nodes lose its key, they and the
	// tail form a second quorum. That is 1 node for odd N and 2 for even N.
	PickOverlap Pick = "overlap"
	// PickQuorumRest picks the nodes of that holder's quorum outside the
	// overlap, 2q−N .. q−1 (NodeSet.Count of them, from the first, when
	// Count > 0): a holder's nodes that a second quorum does not need.
	PickQuorumRest Pick = "quorum-rest"
	// PickAll picks every node.
	PickAll Pick = "all"
)

// NodeSet selects the nodes a fault applies to.
type NodeSet struct {
	Pick  Pick  `json:"pick"`
	Nodes []int `json:"nodes,omitempty"`
	Count int   `json:"count,omitempty"`
}

// Fault is one scheduled fault: at a time from the trial's start, or At
// after an acquisition in the workload (On; At 0: right after it), on a set
// of nodes, undone after For (0 = left until the trial ends; the cluster is
// healed between trials). With Stagger the picked nodes get the fault one
// after another, Stagger apart, in index order, as a rolling restart does.
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
	Rate    float64       `json:"rate,omitempty"`   // clock rate for ActionClockRate
	For     time.Duration `json:"for,omitempty"`
	Stagger time.Duration `json:"stagger,omitempty"`
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
	// MustAcquire lists workload clients that must take the lock at least
	// once per trial, else the trial misses a liveness check (see
	// Result.LivenessMisses): a rival that a broken holder locks out.
	MustAcquire []int `json:"must_acquire,omitempty"`
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
		if f.Action != ActionDelayReplies || f.On != nil || f.At != 0 || f.For != 0 || !f.Nodes.majority(n) {
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
