package chaos

import (
	"fmt"
	"time"
)

// The catalogue's time scale. TTLs are short so that a full run of every
// scenario takes seconds; the mechanisms do not depend on the scale.
const (
	catalogueTTL = 300 * time.Millisecond
	trialLength  = 700 * time.Millisecond
	// catalogueNodeTimeout leaves room for a loaded 2-core machine running
	// 16 clients under the race detector; it is still small against the TTL.
	catalogueNodeTimeout = 50 * time.Millisecond
	scriptedTTL          = time.Second
)

// Catalogue returns every built-in scenario, in the order `redlock chaos`
// runs them: the failure modes of docs/safety.md, each with the verdict we expect
// and why. The scenarios pick nodes relative to the cluster size (minority,
// majority), so they run on any N ≥ 3.
func Catalogue() []Scenario {
	loop := func(clients int) Workload {
		return Workload{Clients: clients, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond, Gap: 2 * time.Millisecond}
	}
	// Two clients: A (client 0) acquires once and works for its whole
	// validity; B (client 1) starts right after A acquired and keeps trying.
	// The TTL is longer than the loops' because the faults A's acquisition
	// triggers include restarting real redis-server processes, which must
	// finish while A still holds the lock.
	holderAndRival := Workload{
		Clients: 2, TTL: scriptedTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond, MaxAcquires: 1,
		HoldOf:  map[int]time.Duration{0: scriptedTTL},
		StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}},
	}
	afterA := &Trigger{Client: 0, Nth: 1}
	// While the minority tail is cut off, A's quorum is exactly the other
	// nodes; healing the tail right after A acquired gives B a path to a
	// quorum through any one of A's nodes that misbehaves.
	tailCut := Fault{Nodes: NodeSet{Pick: PickMinorityTail}, Action: Partition}
	tailBack := Fault{On: afterA, Nodes: NodeSet{Pick: PickMinorityTail}, Action: HealNetworkAct}
	guarded := holderAndRival
	guarded.Quarantine = time.Minute
	amnesiaFaults := []Fault{tailCut, tailBack, {On: afterA, Nodes: NodeSet{Pick: PickGranted, Count: 1}, Action: Amnesia}}
	churn := loop(6)
	churn.Quarantine = time.Minute

	return []Scenario{
		{
			Name: "no-faults", Summary: "4 clients take turns on one key, nothing fails",
			Expect: Safe, Why: "a key is only granted when it is free on a majority; holders release before the next one starts",
			Workload: loop(4), Duration: trialLength, Availability: Available,
		},
		{
			Name: "minority-killed", Summary: "a random minority of nodes is killed mid-run",
			Expect: Safe, Why: "the remaining majority still grants and refuses on its own; availability holds",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{At: trialLength / 4, Nodes: NodeSet{Pick: PickRandomMinority}, Action: Kill}},
		},
		{
			Name: "majority-killed", Summary: "a random majority of nodes is down from the start",
			Expect: Safe, Why: "no quorum can be formed, so no lock is ever reported held (no false success)",
			Workload: loop(3), Duration: trialLength / 2, Availability: Unavailable,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMajority}, Action: Kill}},
		},
		{
			Name: "minority-partition", Summary: "a random minority is cut off (requests and replies lost)",
			Expect: Safe, Why: "partitioned nodes only cost votes; the per-node timeout keeps acquires fast",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMinority}, Action: Partition}},
		},
		{
			Name: "lost-replies", Summary: "a minority executes every command but its replies are lost",
			Expect: Safe, Why: "failed attempts release on every node, also those that seemed silent, so no granted-but-unseen key is left",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMinority}, Action: DropReplies}},
		},
		{
			Name: "slow-node", Summary: "one node answers 1 s late",
			Expect: Safe, Why: "the vote is decided without waiting for stragglers; late grants are cleaned up",
			Workload: loop(4), Duration: trialLength, Availability: Available,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: DelayReplies, Amount: time.Second}},
		},
		{
			Name: "paused-node", Summary: "a minority of nodes freezes for 400 ms (SIGSTOP), then runs the queued commands",
			Expect: Safe, Why: "late SETs applied after the pause belong to attempts that were already released or decided",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{At: trialLength / 7, Nodes: NodeSet{Pick: PickRandomMinority}, Action: PauseNode, Amount: 400 * time.Millisecond}},
		},
		{
			Name: "contention-16", Summary: "16 clients contend for one key",
			Expect: Safe, Why: "split votes fail fast and are released everywhere; jittered retries break the livelock",
			// Embedded nodes run every script in a fresh Lua VM under one lock:
			// 16 clients queue long enough to need a larger per-node timeout.
			// No "no keys left" check: a call that timed out while queued on
			// an overloaded node may still run after the attempt's release,
			// leaving a key until its TTL (docs/safety.md).
			Workload: Workload{Clients: 16, TTL: time.Second, NodeTimeout: 200 * time.Millisecond, Hold: 5 * time.Millisecond, Gap: 2 * time.Millisecond},
			Duration: 2 * trialLength, Availability: Available,
		},
		{
			// The per-node timeout is below TTL − drift, as the library
			// requires, so one round trip always leaves validity; the two
			// round trips of an acquisition (vote, fencing write-back) do not.
			Name: "delayed-replies", Summary: fmt.Sprintf("a majority's replies are delayed %v: the vote and the fencing write-back take longer than the %v TTL allows", 2*catalogueTTL/3, catalogueTTL),
			Expect: Safe, Why: "elapsed time is measured from before the first request, so the SETs land but validity is negative and the lock is refused",
			Workload: Workload{Clients: 2, TTL: catalogueTTL, NodeTimeout: 5 * catalogueTTL / 6, Hold: 5 * time.Millisecond},
			Duration: 2 * trialLength, Availability: Unavailable, Fixed: true,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMajority}, Action: DelayReplies, Amount: 2 * catalogueTTL / 3}},
		},
		{
			Name: "client-pause", Summary: fmt.Sprintf("the holder freezes for %v (a GC pause) after acquiring, then writes", 2*catalogueTTL),
			Expect: Unsafe, Why: "Redlock's limit: the keys expire during the pause and a second client acquires; the stale holder still writes. Only the fenced resource rejects it",
			Workload: Workload{
				Clients: 2, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond, MaxAcquires: 1,
				StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}},
				Pause:   &Pause{Client: 0, Nth: 1, Length: 2 * catalogueTTL},
			},
			Duration: 3 * catalogueTTL, Availability: Available,
		},
		{
			Name: "amnesia-unguarded", Summary: "a node in the holder's quorum restarts without its data; amnesia guard off",
			Expect: Unsafe, Why: "the restarted node grants the key again and, with the nodes that were cut off, forms a second quorum; its fencing counter is lost too, so tokens may repeat",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3, FencingBreaks: true,
			Faults: amnesiaFaults,
		},
		{
			Name: "amnesia-guarded", Summary: "the same restart without data, with the amnesia guard on (1 min quarantine)",
			Expect: Safe, Why: "the restarted node's epoch for the key is gone, so its vote is quarantined until a trusted majority vouches for it; the rival waits for the holder's release",
			Workload: guarded, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: amnesiaFaults,
		},
		{
			Name: "churn-guarded", Summary: "6 clients while random minorities are killed and brought back, and single nodes restart without data; guard on",
			Expect: Safe, Why: "the guard quarantines every node that lost the key's history, and a lost counter is re-seeded from the node's clock, so tokens keep increasing in holder order",
			Workload: churn, Duration: 2 * trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{
				{At: trialLength / 5, Nodes: NodeSet{Pick: PickRandomMinority}, Action: Kill, For: trialLength / 3},
				{At: trialLength * 4 / 5, Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: Amnesia},
				{At: trialLength * 6 / 5, Nodes: NodeSet{Pick: PickRandomMinority}, Action: Kill, For: trialLength / 3},
				{At: trialLength * 8 / 5, Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: Amnesia},
			},
		},
		{
			Name: "clock-jump", Summary: fmt.Sprintf("a node in the holder's quorum jumps its clock %v forward", scriptedTTL),
			Expect: Unsafe, Why: "the key expires early on that node; the drift allowance only covers slow drift, not steps",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack,
				{On: afterA, Nodes: NodeSet{Pick: PickGranted, Count: 1}, Action: JumpClock, Amount: scriptedTTL}},
		},
		{
			Name: "clock-fast", Summary: "a node in the holder's quorum runs its clock 3× fast",
			Expect: Unsafe, Why: "the key expires after a third of the TTL on that node; 200% drift is far beyond the 1% drift factor",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack,
				{Nodes: NodeSet{Pick: PickFixed, Nodes: []int{0}}, Action: ClockRate, Rate: 3}},
		},
		{
			Name: "clock-drift-in-budget", Summary: "a node in the holder's quorum runs its clock 0.4% fast, within the 1% drift factor",
			Expect: Safe, Why: "the validity time subtracts TTL × 0.01 + 2 ms, so the holder stops trusting the lock before that node frees the key",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack,
				{Nodes: NodeSet{Pick: PickFixed, Nodes: []int{0}}, Action: ClockRate, Rate: 1.004}},
		},
	}
}

// Find returns the built-in scenario with the given name.
func Find(name string) (Scenario, bool) {
	for _, s := range Catalogue() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Scaled returns a copy of s with every duration multiplied by k (k ≥ 1):
// TTLs, timeouts, hold and gap times, pauses, fault times and amounts, and
// the trial length. Ratios, and so the mechanisms the scenario exercises,
// stay the same; a slow or loaded machine (the race detector on 2 cores)
// needs a larger k so that node calls fit in their timeouts. A scenario
// marked Fixed is returned unchanged: its margins are absolute (the 2 ms of
// the drift allowance does not scale).
func (s Scenario) Scaled(k float64) Scenario {
	if k <= 1 || s.Fixed {
		return s
	}
	d := func(x time.Duration) time.Duration { return time.Duration(float64(x) * k) }
	w := s.Workload
	w.TTL, w.NodeTimeout, w.Hold, w.Gap, w.Stagger, w.AcquireTimeout = d(w.TTL), d(w.NodeTimeout), d(w.Hold), d(w.Gap), d(w.Stagger), d(w.AcquireTimeout)
	// Whole milliseconds: Redis TTLs are set in ms.
	w.TTL = w.TTL.Round(time.Millisecond)
	if w.HoldOf != nil {
		hold := make(map[int]time.Duration, len(w.HoldOf))
		for i, h := range w.HoldOf {
			hold[i] = d(h)
		}
		w.HoldOf = hold
	}
	if w.Pause != nil {
		p := *w.Pause
		p.Length = d(p.Length)
		w.Pause = &p
	}
	s.Workload = w
	faults := make([]Fault, len(s.Faults))
	for i, f := range s.Faults {
		f.At, f.Amount, f.For = d(f.At), d(f.Amount), d(f.For)
		faults[i] = f
	}
	s.Faults = faults
	s.Duration = d(s.Duration)
	return s
}
