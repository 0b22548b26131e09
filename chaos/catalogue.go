package chaos

import (
	"fmt"
	"slices"
	"time"

	"github.com/d3b93e30/redlock"
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
	// delayed-replies: one client's replies from a majority arrive two
	// thirds of the TTL late. The per-node timeout must exceed the delay and
	// still leave validity after the drift allowance (the library refuses a
	// TTL that cannot: 600 − 8 − 500 = 92 ms ≥ 1 ms), and the delay stays
	// under the connections' read timeout (clientIOTimeout), which is why
	// the scenario is not stretched by Scaled.
	delayedTTL         = 600 * time.Millisecond
	delayedReply       = 400 * time.Millisecond
	delayedNodeTimeout = 500 * time.Millisecond
	// late-extension: A's requests to a majority arrive a third of the TTL
	// late, from right after A acquired. A extends when a tenth of the TTL
	// is left, so the extension lands about 0.23 × TTL after the keys
	// expired there: time for B to take them. The per-node timeout (half the
	// TTL) still waits for it.
	lateRequests = catalogueTTL / 3
)

// Catalogue returns every built-in scenario, in the order `redlock chaos`
// runs them: the failure modes a Redlock must survive (or, where the
// algorithm cannot, the documented limits), each with the verdict we expect
// and why. The scenarios pick nodes relative to the cluster size (minority,
// majority, the overlap of two quorums), so the expected verdicts hold on any
// N ≥ 3, odd or even.
func Catalogue() []Scenario {
	loop := func(clients int) Workload {
		return Workload{Clients: clients, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond, Gap: 2 * time.Millisecond}
	}
	// The whole Acquire API: several writes per hold, one extension per
	// hold (longer and shorter TTLs alternate), and a buggy caller's
	// extension of the handle it has just released, which must fail
	// (without a round trip: the extend script's owner check is reached
	// in late-extension).
	everything := loop(4)
	everything.Extend, everything.ExtendReleased = true, true
	// Two clients: A (client 0) acquires once and works for its whole
	// validity; B (client 1) starts right after A acquired and keeps trying.
	// The TTL is longer than the loops' because the faults A's acquisition
	// triggers include restarting real redis-server processes, which must
	// finish while A still holds the lock.
	holderAndRival := Workload{
		Clients: 2, TTL: scriptedTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond, MaxAcquires: 1,
		HoldOf: map[int]time.Duration{0: scriptedTTL}, WriteEvery: 10 * time.Millisecond,
		StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}},
	}
	afterA := &Trigger{Client: 0, Nth: 1}
	// While the minority tail is cut off, A's quorum is exactly the other
	// nodes; healing the tail right after A acquired gives B a path to a
	// quorum through the overlap of the two quorums if those nodes
	// misbehave.
	tailCut := Fault{Nodes: NodeSet{Pick: PickMinorityTail}, Action: ActionPartition}
	tailBack := Fault{On: afterA, Nodes: NodeSet{Pick: PickMinorityTail}, Action: ActionHealNetwork}
	overlap := NodeSet{Pick: PickOverlap}
	guarded := holderAndRival
	guarded.Quarantine = time.Minute
	amnesiaFaults := []Fault{tailCut, tailBack, {On: afterA, Nodes: overlap, Action: ActionRestartAmnesia}}
	churn := loop(6)
	churn.Quarantine = time.Minute
	// The rival retries every millisecond at most, so that it takes the
	// lock within a few milliseconds of the moment it is free (a second
	// rival would split the votes with it).
	// The TTL is twice as long as the other holder's: the window a broken
	// drift allowance opens (0.9% of the TTL − 2 ms, less the time A's SET
	// took to reach the fast node) must be wide enough to hit on a loaded
	// machine.
	drifting := holderAndRival
	drifting.RetryMax = time.Millisecond
	drifting.TTL = 2 * scriptedTTL
	drifting.HoldOf = map[int]time.Duration{0: drifting.TTL}
	// A (client 0) acquires once and works for its whole validity; B
	// starts once A holds and retries every millisecond, so that it takes
	// the key as soon as A's release or expiry frees it.
	delayedHolder := Workload{
		Clients: 2, TTL: delayedTTL, NodeTimeout: delayedNodeTimeout, Hold: 5 * time.Millisecond, MaxAcquires: 1,
		HoldOf: map[int]time.Duration{0: delayedTTL}, WriteEvery: 10 * time.Millisecond, RetryMax: time.Millisecond,
		AcquireTimeout: 3 * delayedTTL, StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}},
	}
	// A (client 0) works past its validity and extends when a tenth of the
	// TTL is left; B starts once A holds, retries every millisecond, and
	// holds for half a TTL, so that its key is there when A's extension
	// lands. The per-node timeout leaves room for A's requests to arrive
	// late (lateRequests) and the extension still to leave validity.
	lateExtender := Workload{Clients: 2, TTL: catalogueTTL, NodeTimeout: catalogueTTL / 2, MaxAcquires: 1,
		HoldOf: map[int]time.Duration{0: 2 * catalogueTTL, 1: catalogueTTL / 2}, WriteEvery: 10 * time.Millisecond, RetryMax: time.Millisecond,
		StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}}, ExtendLate: catalogueTTL / 10}
	// Long holds kept alive by Do (client 0) and KeepAlive (client 1).
	long := Workload{Clients: 2, TTL: catalogueTTL, NodeTimeout: 2 * catalogueNodeTimeout, Hold: 5 * catalogueTTL / 2,
		WriteEvery: 10 * time.Millisecond, Gap: 2 * time.Millisecond, AcquireTimeout: 10 * catalogueTTL,
		Modes: []Mode{ModeDo, ModeKeepAlive}}
	// A holds with Do for 3 TTLs; B uses Acquire and starts once A holds.
	doAndRival := Workload{Clients: 2, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond,
		HoldOf: map[int]time.Duration{0: 3 * catalogueTTL}, WriteEvery: 5 * time.Millisecond, Gap: 2 * time.Millisecond,
		StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}}, Modes: []Mode{ModeDo, ModeAcquire}}

	// Leader election (election.go): 4 candidates take turns leading;
	// and 3 candidates with Lead, of which A (client 0) is cut off from a
	// majority right after its first election and finishes its 3-TTL term
	// of work after the loss, resigns, and campaigns again while B and C
	// hold 1-TTL terms.
	electionKey := redlock.ElectionKey("chaos")
	electTurns := loop(4)
	electTurns.Key, electTurns.Modes = electionKey, []Mode{ModeElect}
	isolated := Workload{Clients: 3, Key: electionKey, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: catalogueTTL,
		HoldOf: map[int]time.Duration{0: 3 * catalogueTTL}, WriteEvery: 10 * time.Millisecond, Gap: 2 * time.Millisecond,
		StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}, 2: {Client: 0, Nth: 1}}, Modes: []Mode{ModeLead}}

	loss := dataLossScenarios(guarded, tailCut, tailBack, afterA)
	return []Scenario{
		{
			Name: "no-faults", Summary: "4 clients take turns on one key, extend and write throughout each hold; nothing fails",
			Expect: Safe, Why: "a key is only granted when it is free on a majority; extensions are owner-checked, and a released handle cannot be extended",
			Workload: everything, Duration: trialLength, Availability: Available, KeysReleased: true,
		},
		{
			Name: "long-holds", Summary: fmt.Sprintf("2 clients hold for %v (TTL %v) with Do and KeepAlive, writing every 10 ms", 5*catalogueTTL/2, catalogueTTL),
			Expect: Safe, Why: "the lease extends the lock before its validity ends, and Do's reentrant Acquire shares the holder's lock",
			Workload: long, Duration: 6 * catalogueTTL, Availability: Available, Extends: true, KeysReleased: true,
		},
		{
			Name: "minority-killed", Summary: "a random minority of nodes is killed mid-run",
			Expect: Safe, Why: "the remaining majority still grants and refuses on its own; availability holds",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{At: trialLength / 4, Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionKill}},
		},
		{
			Name: "majority-killed", Summary: "a random majority of nodes is down from the start",
			Expect: Safe, Why: "no quorum can be formed, so no lock is ever reported held (no false success)",
			Workload: loop(3), Duration: trialLength / 2, Availability: Unavailable,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMajority}, Action: ActionKill}},
		},
		{
			Name: "majority-partition", Summary: "a random majority is cut off for the first third of the run, then healed",
			Expect: Safe, Why: "no lock while only a minority is reachable; after the heal, locks are granted again",
			// Two thirds of the run are healed: the clients reconnect to the
			// nodes that were cut off, which takes a while on a loaded machine.
			Workload: loop(3), Duration: 3 * trialLength / 2, Availability: Available, NoneBefore: trialLength / 2,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMajority}, Action: ActionPartition, For: trialLength / 2}},
		},
		{
			Name: "minority-partition", Summary: "a random minority is cut off (requests and replies lost)",
			Expect: Safe, Why: "partitioned nodes only cost votes; the per-node timeout keeps acquires fast",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionPartition}},
		},
		{
			Name: "asymmetric-partition", Summary: "right after A took the lock with Do, A (only) loses a majority of nodes; B still sees every node",
			Expect: Safe, Why: "A's extension fails, so its lock-bound context ends and A stops writing before B can take the expired key",
			Workload: doAndRival, Duration: 3 * catalogueTTL, Availability: Available,
			Faults: []Fault{{On: afterA, Nodes: NodeSet{Pick: PickRandomMajority}, Clients: []int{0}, Action: ActionPartition}},
		},
		{
			Name: "lost-replies", Summary: "a minority executes every command but its replies are lost",
			Expect: Safe, Why: "failed attempts release on every node, also those that seemed silent, so no granted-but-unseen key is left",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionDropReplies}},
		},
		{
			Name: "slow-node", Summary: "one node answers 1 s late",
			Expect: Safe, Why: "the vote is decided without waiting for stragglers; late grants are cleaned up",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: ActionDelayReplies, Amount: time.Second}},
		},
		{
			Name: "paused-node", Summary: "a minority of nodes freezes for 400 ms (SIGSTOP), then runs the queued commands",
			Expect: Safe, Why: "late SETs applied after the pause belong to attempts that were already released or decided",
			Workload: loop(4), Duration: trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{At: trialLength / 7, Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionPause, Amount: 400 * time.Millisecond}},
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
			Name: "delayed-replies", Summary: fmt.Sprintf("A's replies from a majority arrive %v late (its requests land at once; TTL %v); B, whose replies are on time, starts once A holds", delayedReply, delayedTTL),
			Expect: Safe, Why: "A's validity counts from before its first request, so A is granted only TTL − delay − drift and stops before its keys expire; B takes the key when A releases it or it expires",
			Workload: delayedHolder, Duration: 3 * delayedTTL, Availability: Available, Fixed: true, ElapsedSubtracted: true,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickRandomMajority}, Clients: []int{0}, Action: ActionDelayReplies, Amount: delayedReply}},
		},
		{
			Name: "late-extension", Summary: fmt.Sprintf("A extends when %v of its validity is left, but its requests to a majority arrive %v late: its keys expire there and B, retrying every millisecond, takes the lock before the extension lands", lateExtender.ExtendLate, lateRequests),
			Expect: Safe, Why: "the extension is owner-checked on every node: on the majority it finds B's key (or none) and fails, so A stops at its deadline",
			Workload: lateExtender, Duration: 3 * catalogueTTL, Availability: Available,
			Faults: []Fault{{On: afterA, Nodes: NodeSet{Pick: PickRandomMajority}, Clients: []int{0}, Action: ActionDelayRequests, Amount: lateRequests}},
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
			Name: "amnesia-unguarded", Summary: "the overlap of two quorums restarts without its data; amnesia guard off",
			Expect: Unsafe, Why: "the restarted nodes grant the key again and, with the nodes that were cut off, form a second quorum; their lost fencing counters are re-created from the clock (B's, as its attempt began, or the node's), above the first holder's token, so the tokens stay in order (checked) and the fenced resource refuses the stale writes, but mutual exclusion is gone",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: amnesiaFaults,
		},
		{
			Name: "amnesia-guarded", Summary: "the same restart without data, with the amnesia guard on (1 min quarantine)",
			Expect: Safe, Why: "the restarted nodes' epoch for the key is gone, so their votes are quarantined until a trusted majority vouches for them; the rival waits for the holder's release",
			Workload: guarded, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: amnesiaFaults,
		},
		{
			Name: "churn-guarded", Summary: "6 clients while random minorities are killed and brought back, and single nodes restart without data; guard on",
			Expect: Safe, Why: "the guard quarantines every node that lost the key's history, and a lost counter is re-seeded from the clock, so tokens keep increasing in holder order",
			Workload: churn, Duration: 2 * trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{
				{At: trialLength / 5, Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionKill, For: trialLength / 3},
				{At: trialLength * 4 / 5, Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: ActionRestartAmnesia},
				{At: trialLength * 6 / 5, Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionKill, For: trialLength / 3},
				{At: trialLength * 8 / 5, Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: ActionRestartAmnesia},
			},
		},
		{
			Name: "clock-jump", Summary: fmt.Sprintf("the overlap of two quorums jumps its clock %v forward while A holds", scriptedTTL),
			Expect: Unsafe, Why: "the key expires early on those nodes; the drift allowance only covers slow drift, not steps",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {On: afterA, Nodes: overlap, Action: ActionJumpClock, Amount: scriptedTTL}},
		},
		{
			Name: "clock-fast", Summary: "the overlap of two quorums runs its clock 3× fast",
			Expect: Unsafe, Why: "the key expires after a third of the TTL there; 200% drift is far beyond the 1% drift factor",
			Workload: holderAndRival, Duration: 2 * scriptedTTL, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {Nodes: overlap, Action: ActionClockRate, Rate: 3}},
		},
		{
			Name: "clock-drift-in-budget", Summary: "the overlap of two quorums runs its clock 0.9% fast, just within the 1% drift factor",
			Expect: Safe, Why: "the validity time subtracts TTL × 0.01 + 2 ms, so the holder stops trusting the lock about 4 ms before those nodes free the key; the rival retries every millisecond",
			Workload: drifting, Duration: 2 * drifting.TTL, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {Nodes: overlap, Action: ActionClockRate, Rate: 1.009}},
		},
		clockBackScenario(holderAndRival, tailCut, tailBack, afterA),
		{
			Name: "exec-asymmetric-partition", Summary: fmt.Sprintf("A runs a %v job under redlock exec's supervision; right after A took the lock, A (only) loses a majority of nodes; B still sees every node", 2*catalogueTTL),
			Expect: Safe, Why: "A's extension fails, so the lease ends and the job's process group gets SIGTERM (SIGKILL by the validity's end): the job has exited before B can take the expired key",
			// A's hold lasts until its job process has exited.
			Workload: Workload{Clients: 2, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond,
				HoldOf: map[int]time.Duration{0: 2 * catalogueTTL}, WriteEvery: 5 * time.Millisecond, Gap: 2 * time.Millisecond,
				StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}}, Modes: []Mode{ModeExec, ModeAcquire}},
			Duration: 3 * catalogueTTL, Availability: Available,
			Faults: []Fault{{On: afterA, Nodes: NodeSet{Pick: PickRandomMajority}, Clients: []int{0}, Action: ActionPartition}},
		},
		{
			Name: "election-turns", Summary: "4 candidates of one election campaign, lead for a moment, resign and campaign again; nothing fails",
			Expect: Safe, Why: "a leadership is the lock on the election's key, so two never overlap; the term is the lock's fencing token, so it grows from leader to leader",
			Workload: electTurns, Duration: trialLength, Availability: Available, KeysReleased: true,
		},
		{
			Name: "leader-isolated", Summary: fmt.Sprintf("3 candidates with Lead; right after A is elected, A (only) loses a majority of nodes for %v; A finishes its term's work, resigns, campaigns again", 2*catalogueTTL),
			Expect: Safe, Why: "A's extension fails, so its leadership ends before its keys expire and another is elected; A's late resign is owner-checked, and A's next leadership has a new, higher term",
			Workload: isolated, Duration: 8 * catalogueTTL, Availability: Available,
			Faults: []Fault{{On: afterA, Nodes: NodeSet{Pick: PickRandomMajority}, Clients: []int{0}, Action: ActionPartition, For: 2 * catalogueTTL}},
		},
		loss[0], loss[1], loss[2], loss[3], loss[4], loss[5],
	}
}

// Find returns the built-in scenario with the given name (Builtin).
func Find(name string) (Scenario, bool) {
	for _, s := range Builtin() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Builtin returns every built-in scenario, the ones Find knows: the
// catalogue, then SemaphoreScenarios, the multi-key lock's (multilock.go)
// and RWScenarios.
func Builtin() []Scenario {
	return slices.Concat(Catalogue(), SemaphoreScenarios(), multiScenarios(), RWScenarios())
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
	w.WriteEvery, w.RetryMax, w.ExtendLate = d(w.WriteEvery), d(w.RetryMax), d(w.ExtendLate)
	// The quarantine too: a scenario may set it to a TTL, so that a rival
	// is let in within the trial.
	w.Quarantine = d(w.Quarantine)
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
	s.NoneBefore = d(s.NoneBefore)
	return s
}
