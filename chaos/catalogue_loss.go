package chaos

import (
	"fmt"
	"time"
)

// lossGap is the time between the two faults of a data-loss scenario: the
// second node loses its data a fifth of the holder's TTL after the first.
const lossGap = scriptedTTL / 5

// lossTrial is the length of a data-loss trial: the holder's hold (a TTL)
// and some time after it, kept short for the default test run.
const lossTrial = 3 * scriptedTTL / 2

// dataLossScenarios returns the catalogue's data-loss scenarios beyond
// amnesia-guarded: the ways real Redis loses a lock's key while it is held
// (restarts without persistence, FLUSHALL, a restart that lost its last
// writes, a fresh server on the node's address, an evicted key), each with
// the amnesia guard on, as the library's default; and the majority loss
// that catches an extension re-creating vanished keys. guarded is the
// holder-and-rival workload with the guard on; tailCut and tailBack make
// the holder's quorum the first q nodes, as in amnesia-guarded; afterA
// fires right after the holder (client 0) acquired.
func dataLossScenarios(guarded Workload, tailCut, tailBack Fault, afterA *Trigger) []Scenario {
	overlap := NodeSet{Pick: PickOverlap}
	rest := NodeSet{Pick: PickQuorumRest, Count: 1}
	// A (client 0) holds with Do for longer than the trial, so that an
	// extension that wrongly succeeds keeps the lock from B to the end; B
	// (client 1) starts once A holds; each acquires once. The quarantine
	// is one TTL: with the correct lock B takes the lock a TTL after the
	// flush. B retries every half TTL at most: a retry every few
	// milliseconds would often hold the flushed nodes (a failed attempt's
	// short-lived grants) when A extends, failing A's extension for the
	// wrong reason. A flushed node votes again once its new incarnation is
	// recorded on a majority of the other nodes, which a majority flushed
	// has to rebuild: B takes the lock within about 3 s. The trial lasts 10
	// TTLs, and A would hold for 12: an extension that re-created its keys
	// keeps B out for the whole trial.
	flushedHolder := Workload{Clients: 2, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond, MaxAcquires: 1,
		HoldOf: map[int]time.Duration{0: 12 * catalogueTTL}, WriteEvery: 5 * time.Millisecond, Gap: 2 * time.Millisecond,
		StartOn: map[int]Trigger{1: {Client: 0, Nth: 1}}, Modes: []Mode{ModeDo, ModeAcquire}, Quarantine: catalogueTTL, RetryMax: catalogueTTL / 2}
	return []Scenario{
		{
			Name: "amnesia-two-restarts", Summary: fmt.Sprintf("two of the holder's nodes restart without their data, one after the other (%v apart), while it holds; guard on", lossGap),
			Expect: Safe, Why: "each restarted node lost the key's epoch, so its vote is quarantined: the rival finds too few trusted votes (the holder's other nodes refuse), and waits for the holder's release",
			Workload: guarded, Duration: lossTrial, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {On: afterA, Nodes: NodeSet{Pick: PickGranted, Count: 2}, Action: ActionRestartAmnesia, Stagger: lossGap}},
		},
		{
			Name: "flush-then-restart", Summary: fmt.Sprintf("FLUSHALL on the overlap of two quorums while the holder holds, then (%v later) another of its nodes restarts without data; guard on", lossGap),
			Expect: Safe, Why: "FLUSHALL deletes the key's epoch with the key, as a restart does: both nodes' votes are quarantined",
			Workload: guarded, Duration: lossTrial, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {On: afterA, Nodes: overlap, Action: ActionFlush},
				{On: afterA, At: lossGap, Nodes: rest, Action: ActionRestartAmnesia}},
		},
		{
			Name: "stale-restarts", Summary: fmt.Sprintf("a majority restarts one node after another (%v apart) from a snapshot taken as the trial began, just before the holder acquired: the writes since are lost, as with appendfsync everysec after a power loss; guard on", scriptedTTL/10),
			Expect: Unsafe, Why: "a finding: the snapshot has the key's trusted epoch and fencing counter from before the holder's grant, so the restored majority grants the rival with trusted votes while the holder still holds (the per-key rule counts a trusted epoch); the restored fencing counters predate the holder's grant (only the rival's failed attempts in between raise them), so token order is reported but not judged: fencing's assumption that a node in both quorums keeps its data fails. Only the new run_id shows this loss: the harness's clients (New, not Dial) read it at a check, not on each new connection, and a majority restored is beyond the guard's stated limit anyway",
			Workload: guarded, Duration: lossTrial, Availability: Available, MinNodes: 3, FencingBreaks: true,
			Faults: []Fault{{Nodes: NodeSet{Pick: PickAll}, Action: ActionSnapshot},
				{On: afterA, Nodes: NodeSet{Pick: PickRandomMajority}, Action: ActionRestartStale, Stagger: scriptedTTL / 10}},
		},
		{
			Name: "node-replaced", Summary: "the overlap of two quorums is replaced by a fresh server on the same address (no data, no loaded scripts, a new run_id) while the holder holds; guard on",
			Expect: Safe, Why: "the fresh server has no epoch for the key, so its vote is quarantined as a restarted node's; the library loads its scripts again on NOSCRIPT",
			Workload: guarded, Duration: lossTrial, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {On: afterA, Nodes: overlap, Action: ActionReplace}},
		},
		{
			Name: "key-evicted", Summary: fmt.Sprintf("the lock key is evicted on the overlap of two quorums (maxmemory_policy allkeys-lru; the counter and epoch stay) while the holder holds, then (%v later) another of its nodes restarts without data; guard on", lossGap),
			Expect: Unsafe, Why: "a finding: eviction deletes the lock key but leaves the node's run_id, its marker and the key's trusted epoch, so nothing the guard reads changes (a node whose policy may evict is judged by the per-key rule, which counts a trusted epoch), and with the nodes that were cut off the rival wins a quorum while the holder holds",
			Workload: guarded, Duration: lossTrial, Availability: Available, MinNodes: 3,
			Faults: []Fault{tailCut, tailBack, {On: afterA, Nodes: overlap, Action: ActionEvictKey},
				{On: afterA, At: lossGap, Nodes: rest, Action: ActionRestartAmnesia}},
		},
		{
			Name: "majority-flushed", Summary: fmt.Sprintf("A holds with Do (extending); %v after A acquired, FLUSHALL on a random majority; B starts once A holds; guard on, quarantine one TTL", catalogueTTL/10),
			Expect: Safe, Why: "A's next extension finds its key gone on a majority and fails, so A's lock-bound context ends; B's votes on the flushed nodes are quarantined for a TTL, longer than A's validity could last, and then B takes the lock. An extension that re-created the vanished keys would keep A holding and lock B out",
			Workload: flushedHolder, Duration: 10 * catalogueTTL, Availability: Available, MustAcquire: []int{1},
			Faults: []Fault{{On: afterA, At: catalogueTTL / 10, Nodes: NodeSet{Pick: PickRandomMajority}, Action: ActionFlush}},
		},
	}
}
