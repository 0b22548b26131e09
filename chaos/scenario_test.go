package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// testTimeScale stretches the scenarios' time scale in tests: the race
// detector makes every call several times slower, and CI runs the other
// packages' tests on the same 2 cores at the same time.
const testTimeScale = 3

// catalogueParallel is how many catalogue scenarios run at once, each on a
// cluster of its own: a scenario mostly waits (real time), so two side by
// side halve the catalogue's time and leave the verdicts' margins as they
// are (the election and semaphore catalogues run three).
const catalogueParallel = 2

// runCatalogue runs every scenario once on a fresh cluster of the backend
// and checks each observed verdict against the expected one, plus the
// figures the verdicts rest on.
func runCatalogue(t *testing.T, backend Backend) {
	ctx := context.Background()
	sem := make(chan struct{}, catalogueParallel)
	var wg sync.WaitGroup
	for _, s := range Catalogue() {
		s = s.Scaled(testTimeScale)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(s.Name, func(t *testing.T) {
				cluster := newCatalogueCluster(t, backend)
				res := runTrialTakingALock(t, ctx, cluster, s, s.Availability == Available)
				for _, n := range res.Notes {
					t.Log("note:", n)
				}
				if res.Skipped != "" {
					t.Logf("skipped on %s: %s", backend, res.Skipped)
					return
				}
				assert.Equal(t, s.Expect, res.Observed, "verdict of %s", s.Name)
				if !s.FencingBreaks {
					assert.Zero(t, res.StaleFenced, "the fenced resource accepted a stale write")
					assert.Zero(t, res.TokenOrder, "fencing tokens out of order")
				}
				switch s.Availability {
				case Available:
					assert.Positive(t, res.Acquisitions)
				case Unavailable:
					assert.Zero(t, res.Acquisitions)
				}
			})
		})
	}
	wg.Wait()
	if pids := redisserver.LivePids(); len(pids) != 0 {
		t.Errorf("redis-server pids left after Close: %v", pids)
	}
	waitDialProbes(t)
}

// runTrialTakingALock runs one trial of s on cluster (seed 7) and, when
// retry, another with the next seed while the trial took no lock and showed
// no violation, up to 3 in all: a trial that took no lock tested nothing (on
// a loaded machine every call of a short trial can time out). The first
// trial that took a lock, or showed a violation, is the one returned, so
// safety is judged in every trial run.
func runTrialTakingALock(t *testing.T, ctx context.Context, cluster *Cluster, s Scenario, retry bool) Result {
	t.Helper()
	for seed := uint64(7); ; seed++ {
		res, err := Run(ctx, cluster, s, 1, seed, func(line string) { t.Log(line) })
		require.NoError(t, err)
		if !retry || res.IdleTrials == 0 || res.Violations > 0 || seed == 9 {
			return res
		}
		t.Logf("%s: trial %d took no lock (a liveness miss); another trial", s.Name, seed-6)
	}
}

func TestCatalogue_InProcess(t *testing.T) {
	runCatalogue(t, InProcess)
}

func TestCatalogue_RedisServer(t *testing.T) {
	redisserver.Require(t)
	runCatalogue(t, RedisServer)
}

// The client-pause scenario is Kleppmann's: the stale holder's write is
// accepted by the plain resource and rejected by the fenced one.
func TestScenario_ClientPauseFencedRejectsStaleWrite(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 5})
	s, ok := Find("client-pause")
	require.True(t, ok)
	s = s.Scaled(testTimeScale)
	res, err := Run(ctx, cluster, s, 1, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, Unsafe, res.Observed)
	assert.GreaterOrEqual(t, res.Violations, 1)
	assert.Equal(t, 1, res.StalePlain)
	assert.Zero(t, res.StaleFenced)
	require.Len(t, res.Reports, 1)
	assert.Equal(t, 1, res.Reports[0].RejectedWritesFenced)
	assert.Equal(t, 1, res.UnsafeTrials)
	assert.Equal(t, 1, res.NotSafe())
	assert.InDelta(t, 0.05, res.RateLower, 1e-9, "1 unsafe trial in 1: the rate is at least 5 %")
}

// Run counts the trials of each verdict and bounds the rate of the trials
// that were not safe: 0 in 10 safe trials bound it below 1 − 0.05^(1/10);
// 10 broken trials in 10 (a lock taken where none may be) bound it above
// 0.05^(1/10).
func TestRun_CountsTrialsAndBoundsTheRate(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 3})
	s := Scenario{
		Name: "quiet", Expect: Safe, Duration: 30 * time.Millisecond,
		Workload: Workload{Clients: 1, TTL: 200 * time.Millisecond, Hold: time.Millisecond, Gap: time.Millisecond},
	}
	res, err := Run(ctx, cluster, s, 10, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, 10, res.Trials)
	assert.Equal(t, [3]int{0, 0, 0}, [3]int{res.UnsafeTrials, res.BrokenTrials, res.NotSafe()})
	assert.Equal(t, Safe, res.Observed)
	assert.Zero(t, res.RateLower)
	assert.InDelta(t, 1-math.Pow(0.05, 0.1), res.RateUpper, 1e-9)

	// One client alone on a healthy cluster takes the lock in 300 ms.
	s.Availability, s.Duration = Unavailable, 300*time.Millisecond
	res, err = Run(ctx, cluster, s, 10, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, [3]int{0, 10, 10}, [3]int{res.UnsafeTrials, res.BrokenTrials, res.NotSafe()})
	assert.Equal(t, Broken, res.Observed)
	assert.InDelta(t, math.Pow(0.05, 0.1), res.RateLower, 1e-9)
	assert.Equal(t, 1.0, res.RateUpper)
}

// A trial whose only failure is a liveness check is judged on its safety
// alone; one that took no lock is left out of the counts; a scenario whose
// every trial missed is broken. RunMutant keeps such a miss in the verdict:
// it catches a mutant.
func TestRun_LivenessMisses(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 3})
	// Held locks, never extended: safe, but the liveness check fails.
	s := Scenario{
		Name: "unextended", Expect: Safe, Duration: 100 * time.Millisecond, Extends: true,
		Workload: Workload{Clients: 1, TTL: 200 * time.Millisecond, Hold: time.Millisecond, Gap: time.Millisecond},
	}
	res, err := Run(ctx, cluster, s, 4, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, 4, res.LivenessMisses)
	assert.Zero(t, res.IdleTrials)
	assert.Equal(t, 4, res.Exercised())
	assert.Zero(t, res.NotSafe(), "their safety held")
	assert.Equal(t, Broken, res.Observed, "no trial passed the liveness check")
	assert.Contains(t, res.Notes, "4 of 4 trials missed the scenario's liveness check: every trial did, so the verdict is broken")

	needMutants(t)
	i := slices.IndexFunc(Mutants(), func(m Mutant) bool { return m.Name == "keepalive-never-extends" })
	require.GreaterOrEqual(t, i, 0)
	mres, err := RunMutant(ctx, cluster, s, Mutants()[i], 4, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, 1, mres.Trials, "the first trial catches the mutant")
	assert.Equal(t, 1, mres.BrokenTrials)
	assert.Zero(t, mres.LivenessMisses)

	// Every node killed: no lock, an idle trial.
	s = Scenario{
		Name: "idle", Expect: Safe, Duration: 50 * time.Millisecond, Availability: Available,
		Faults:   []Fault{{Nodes: NodeSet{Pick: PickFixed, Nodes: []int{0, 1, 2}}, Action: ActionKill}},
		Workload: Workload{Clients: 1, TTL: 200 * time.Millisecond, NodeTimeout: 10 * time.Millisecond, Hold: time.Millisecond, Gap: time.Millisecond},
	}
	res, err = Run(ctx, cluster, s, 3, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, [3]int{3, 3, 0}, [3]int{res.LivenessMisses, res.IdleTrials, res.Exercised()})
	assert.Equal(t, Broken, res.Observed)
	assert.Equal(t, [2]float64{0, 1}, [2]float64{res.RateLower, res.RateUpper}, "no trial counts: no information")
}

// The same seed gives the same schedule of faults: which nodes a random
// fault picks.
func TestTrialSeed_SameSeedSameSchedule(t *testing.T) {
	assert.Equal(t, trialSeed(42, "minority-killed", 0), trialSeed(42, "minority-killed", 0))
	assert.NotEqual(t, trialSeed(42, "minority-killed", 0), trialSeed(42, "minority-killed", 1))
	assert.NotEqual(t, trialSeed(42, "minority-killed", 0), trialSeed(43, "minority-killed", 0))

	cluster := newTestCluster(t, ClusterOptions{Nodes: 5})
	picks := func(seed uint64) [][]int {
		inj := newInjector(cluster, oracle.NewOracle(), seed)
		var out [][]int
		for range 5 {
			out = append(out, inj.pick(NodeSet{Pick: PickRandomMinority}, nil))
		}
		return out
	}
	assert.Equal(t, picks(9), picks(9))
	assert.NotEqual(t, picks(9), picks(10))
}

// A fault scheduled at a time is applied then, and recorded as a band.
func TestRun_TimedFaultIsApplied(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 3})
	s := Scenario{
		Name: "timed-kill", Expect: Safe, Duration: 300 * time.Millisecond,
		Workload: Workload{Clients: 1, TTL: 200 * time.Millisecond, Hold: time.Millisecond, Gap: time.Millisecond},
		Faults:   []Fault{{At: 100 * time.Millisecond, Nodes: NodeSet{Pick: PickFixed, Nodes: []int{1}}, Action: ActionKill}},
	}
	res, err := Run(ctx, cluster, s, 1, 1, nil)
	require.NoError(t, err)
	require.Len(t, res.Histories, 1)
	var killed []oracle.FaultRecord
	for _, f := range res.Histories[0].h.Faults {
		if f.Node == 1 && f.What == "killed" {
			killed = append(killed, f)
		}
	}
	require.Len(t, killed, 1, "faults: %+v", res.Histories[0].h.Faults)
	assert.GreaterOrEqual(t, killed[0].From, 100*time.Millisecond)
}

// The overlap of two quorums is 2q−N nodes: with those and the minority
// tail, a second quorum forms, for odd and even N alike.
func TestPick_OverlapOfTwoQuorums(t *testing.T) {
	ctx := context.Background()
	for n := 3; n <= 7; n++ {
		cluster, err := NewCluster(ctx, ClusterOptions{Nodes: n})
		require.NoError(t, err)
		inj := newInjector(cluster, oracle.NewOracle(), 1)
		q := n/2 + 1
		overlap := inj.pick(NodeSet{Pick: PickOverlap}, nil)
		tail := inj.pick(NodeSet{Pick: PickMinorityTail}, nil)
		assert.Len(t, overlap, 2*q-n, "N=%d", n)
		assert.Equal(t, q, len(overlap)+len(tail), "N=%d: overlap and tail form a quorum", n)
		for _, i := range overlap {
			assert.Less(t, i, q, "N=%d: the overlap lies in the holder's quorum", n)
		}
		require.NoError(t, cluster.Close())
	}
}

// A scenario expected unsafe that shows no violation gets more trials, up to
// UnsafeTrialLimit, and then reports safe, saying so: the verdict follows the
// counts. Skipped is neither a match nor a mismatch.
func TestRun_ExpectedUnsafeRunsMoreTrials(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 3})
	s := Scenario{
		Name: "quiet", Expect: Unsafe, Duration: 30 * time.Millisecond,
		Workload: Workload{Clients: 1, TTL: 200 * time.Millisecond, Hold: time.Millisecond, Gap: time.Millisecond},
	}
	res, err := Run(ctx, cluster, s, 1, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, UnsafeTrialLimit, res.Trials)
	assert.Equal(t, Safe, res.Observed)
	assert.Zero(t, res.Violations)
	assert.True(t, res.Mismatch())
	assert.Contains(t, res.Notes, "no violation in 8 trials (the limit is 8)")

	s.MinNodes = 5
	res, err = Run(ctx, cluster, s, 1, 1, nil)
	require.NoError(t, err)
	assert.NotEmpty(t, res.Skipped)
	assert.False(t, res.Match())
	assert.False(t, res.Mismatch())
}

// With an even number of nodes two quorums share two nodes; the scripted
// scenarios fault that overlap, so their expected verdicts hold (N=4).
func TestCatalogue_EvenNodes(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 4})
	for _, name := range []string{"clock-jump", "amnesia-unguarded", "amnesia-guarded"} {
		s, ok := Find(name)
		require.True(t, ok)
		res, err := Run(ctx, cluster, s.Scaled(testTimeScale), 1, 5, nil)
		require.NoError(t, err)
		assert.Equal(t, s.Expect, res.Observed, "%s on 4 nodes: %v", name, res.Notes)
	}
}

// delayed-replies: the holder whose replies from a majority are late gets a
// lock with at most TTL − delay − drift of validity, stops in time, and the
// rival takes the key after it. A lock that counts its validity from the
// replies (the no-elapsed mutant) is caught twice: the validity check says
// so, and the holder still writes after the rival acquired (an overlap).
func TestScenario_DelayedRepliesHolderStopsInTime(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 5})
	s, ok := Find("delayed-replies")
	require.True(t, ok)
	require.Equal(t, s, s.Scaled(testTimeScale), "the delay must stay under clientIOTimeout")
	caps := s.validityCaps(5)
	require.Len(t, caps, 1)
	assert.Equal(t, delayedTTL-delayedReply-redlock.Drift(delayedTTL, redlock.DefaultDriftFactor), caps[0])

	res, err := Run(ctx, cluster, s, 1, 3, nil)
	require.NoError(t, err)
	assert.Equal(t, Safe, res.Observed, "notes: %v", res.Notes)
	assert.Equal(t, 2, res.Acquisitions, "the holder and then the rival")
	assert.Zero(t, res.Violations)

	needMutants(t)
	m, ok := findMutant("no-elapsed")
	require.True(t, ok)
	res, err = RunMutant(ctx, cluster, s, m, 3, 3, nil)
	require.NoError(t, err)
	assert.Equal(t, Broken, res.Observed)
	assert.Positive(t, res.Violations, "the holder must overlap the rival")
	assert.Positive(t, res.StalePlain)
	assert.Zero(t, res.StaleFenced)
	assert.True(t, slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "was not subtracted") }), "notes: %v", res.Notes)
}

// The elapsed-time check applies only to faults that delay a client's
// replies on a majority from the start: only then must its quorum wait.
func TestScenario_ValidityCaps(t *testing.T) {
	w := Workload{TTL: time.Second, DriftFactor: 0.01}
	delay := func(ns NodeSet, clients ...int) Fault {
		return Fault{Nodes: ns, Clients: clients, Action: ActionDelayReplies, Amount: 300 * time.Millisecond}
	}
	majority := NodeSet{Pick: PickRandomMajority}
	s := Scenario{Workload: w, Faults: []Fault{delay(majority, 0, 2), delay(NodeSet{Pick: PickRandomMinority}, 1)}}
	want := time.Second - 300*time.Millisecond - 12*time.Millisecond
	assert.Equal(t, map[int]time.Duration{0: want, 2: want}, s.validityCaps(5))
	assert.Equal(t, map[int]time.Duration{1: want}, Scenario{Workload: w, Faults: []Fault{delay(NodeSet{Pick: PickFixed, Nodes: []int{0, 1}}, 1)}}.validityCaps(3))
	assert.Empty(t, Scenario{Workload: w, Faults: []Fault{delay(NodeSet{Pick: PickFixed, Nodes: []int{0, 1}}, 1)}}.validityCaps(4))
	everyone := Scenario{Workload: w, Faults: []Fault{delay(majority)}}
	everyone.Workload.Clients = 2
	assert.Equal(t, map[int]time.Duration{0: want, 1: want}, everyone.validityCaps(5))
	late := delay(majority, 0)
	late.At = time.Millisecond
	assert.Empty(t, Scenario{Workload: w, Faults: []Fault{late}}.validityCaps(5))
}

// A scenario whose own settings the library refuses (here a per-node timeout
// that leaves the TTL no validity) is a harness mistake, not a lock that is
// unavailable: the verdict is Broken with the library's reason, and each
// client stops at the first refusal instead of spinning through the trial.
func TestScenario_RefusedSettingsAreReported(t *testing.T) {
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 3})
	s := Scenario{
		Name: "refused", Expect: Safe, Duration: 200 * time.Millisecond, Availability: Unavailable,
		Workload: Workload{Clients: 2, TTL: 100 * time.Millisecond, NodeTimeout: 100 * time.Millisecond, Hold: time.Millisecond},
	}
	res, err := Run(ctx, cluster, s, 1, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, Broken, res.Observed)
	assert.LessOrEqual(t, res.Failed, 2, "one refused call per client")
	found := false
	for _, n := range res.Notes {
		found = found || strings.Contains(n, "refused the scenario's own settings") && strings.Contains(n, "smallest usable ttl")
	}
	assert.True(t, found, "notes %q name the refusal", res.Notes)
}

// A scenario that expects acquisitions (Available) must leave a quorum of
// healthy nodes on every cluster size it runs on: below MinNodes it is
// skipped, never reported broken. Faults that stay until the trial ends, on
// every client's connections, take their nodes out of the vote (a reply 1 s
// late is past any per-node timeout of the catalogue); what is left must
// still be a majority. slow-node once ran on 2 nodes and reported "broken"
// (no acquisition), because its one slow node left a single vote of two.
func TestCatalogue_AvailableScenariosKeepAQuorum(t *testing.T) {
	for _, s := range Catalogue() {
		if s.Availability != Available {
			continue
		}
		for n := max(1, s.MinNodes); n <= 7; n++ {
			quorum := n/2 + 1
			lost := 0
			for _, f := range s.Faults {
				if f.For != 0 || f.On != nil || len(f.Clients) > 0 {
					continue
				}
				switch f.Action {
				case ActionKill, ActionPartition, ActionDropRequests, ActionDropReplies, ActionDelayRequests, ActionDelayReplies:
				default:
					continue
				}
				switch f.Nodes.Pick {
				case PickRandomMinority:
					lost += n - quorum
				case PickRandomMajority:
					lost += quorum
				case PickRandom:
					lost += f.Nodes.Count
				case PickFixed:
					lost += len(f.Nodes.Nodes)
				}
			}
			assert.GreaterOrEqual(t, n-min(lost, n), quorum,
				"%s on %d nodes: its faults leave fewer than a quorum of %d nodes, so it cannot acquire; set MinNodes", s.Name, n, quorum)
		}
	}
}

// The warm-up that gives the workload's key its history on the nodes must
// succeed: where it cannot (here a majority is down), connect is an error,
// not a trial that would measure a key without history (with the amnesia
// guard, one whose every vote might stay quarantined), and it leaves no
// client open.
func TestConnect_KeyWithoutHistoryIsAnError(t *testing.T) {
	c := newTestCluster(t, ClusterOptions{Nodes: 3})
	mustDo(t, "Kill", c.Node(0).Kill())
	mustDo(t, "Kill", c.Node(1).Kill())
	w := Workload{Clients: 2, TTL: time.Second, Quarantine: time.Minute}
	clients, err := w.connect(tctx(t, time.Second), [][]string{c.Addrs(), c.Addrs()}, nil)
	require.ErrorContains(t, err, "the workload's key has no history on the nodes")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.Nil(t, clients)
}

// A trial that expected acquisitions and got none says why the calls
// failed: the commonest reason, with its count.
func TestJudge_NoAcquisitionNamesTheCommonestFailure(t *testing.T) {
	s := Scenario{Name: "x", Expect: Safe, Availability: Available}
	v, notes, missed := judge(s, oracle.Report{FailureReasons: map[string]int{"timed out": 1, "quarantined": 3}}, trialResult{})
	assert.Equal(t, Broken, v)
	assert.Empty(t, notes, "a liveness miss, not a broken promise")
	assert.Equal(t, []string{"no acquisition succeeded, but the scenario expects some (the commonest failure, 3 of 4 failed calls: quarantined)"}, missed)
	_, _, missed = judge(s, oracle.Report{}, trialResult{})
	assert.Equal(t, []string{"no acquisition succeeded, but the scenario expects some (no call failed before the trial ended; calls the end cut short are not counted)"}, missed)
}

// With the amnesia guard on, connect returns only once every node vouched
// for the workload key's epoch: here node 4's requests arrive 150 ms late,
// so the warm-up's vouching of node 4 lands after its Release returned; the
// trial's deletion of the lock key must not come first, or node 4's votes
// stay quarantined for the whole trial (CI saw such a trial get no
// acquisition at all).
func TestConnect_GuardedKeyTrustedOnEveryNode(t *testing.T) {
	c := newTestCluster(t, ClusterOptions{Nodes: 5})
	c.Node(4).DelayRequests(150 * time.Millisecond)
	w := Workload{Clients: 1, TTL: time.Second, Quarantine: time.Minute}
	ctx := tctx(t, 20*time.Second)
	clients, err := w.connect(ctx, [][]string{c.Addrs()}, nil)
	require.NoError(t, err)
	defer closeClients(clients)
	require.NoError(t, c.deleteKey(ctx, w.key()))
	c.Node(4).DelayRequests(0)
	time.Sleep(300 * time.Millisecond) // anything still on its way lands
	states, err := clients[0].Inspect(ctx, w.key())
	require.NoError(t, err)
	for i, st := range states {
		assert.True(t, st.Trusted, "node %d: %+v", i, st)
	}
}

// A set-up that failed the way a loaded machine makes it fail (the warm-up
// took no lock in time, a call timed out) is tried again; any other error
// ends the run.
func TestSetupError_OnlyLoadFailuresAreRetried(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("chaos: the workload's key has no history on the nodes: %w", redlock.ErrNotAcquired),
		fmt.Errorf("delete: %w", context.DeadlineExceeded),
		&net.OpError{Op: "dial", Net: "tcp", Err: timeoutError{}},
	} {
		assert.ErrorIs(t, setupError(err), errSetup, "%v", err)
		assert.ErrorIs(t, setupError(err), err, "the cause is kept")
	}
	for _, err := range []error{redlock.ErrInvalidArgument, errors.New("porcupine disagrees"), &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("refused")}} {
		assert.NotErrorIs(t, setupError(err), errSetup, "%v", err)
	}
}

type timeoutError struct{}

func (timeoutError) Error() string   { return "i/o timeout" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
