package etcdcompare

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/fencing"
	"github.com/d3b93e30/redlock/internal/faultlog"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// Action is a fault applied to members of the etcd cluster.
type Action string

// The fault actions. "Its clients" are the workload clients that talk to the
// member (each through a proxy of its own).
const (
	// Kill isolates the member and stops it for the rest of the trial
	// (Cluster.Kill); its clients' dials are refused.
	Kill Action = "kill"
	// Isolate cuts the member off from its peers (Cluster.Isolate); its
	// clients still reach it.
	Isolate Action = "isolate"
	// Partition isolates the member and loses its clients' traffic both
	// ways: it is cut off from everyone.
	Partition Action = "partition"
	// DropReplies loses every reply the member sends to its clients; the
	// member still executes their requests.
	DropReplies Action = "drop-replies"
	// DelayReplies delays every reply to its clients by Amount.
	DelayReplies Action = "delay-replies"
	// Freeze is the closest in-process equivalent of SIGSTOP: for Amount
	// the member is isolated and its clients' traffic is held (buffered),
	// then everything queued is delivered.
	Freeze Action = "freeze"
	// Cut is a network partition that heals: for Amount the member is cut
	// off from its peers and from its clients, then it rejoins. Its
	// clients' traffic is held, not lost, and delivered when the cut ends,
	// as TCP retransmits what a short partition dropped (losing bytes would
	// break the gRPC streams, which real partitions do not do). The
	// mechanics are Freeze's; the label says which fault it stands for.
	Cut Action = "cut"
)

// Pick says which members a fault hits.
type Pick string

// The picks. Random picks come from the trial's seeded generator.
const (
	PickRandomMinority Pick = "random-minority" // n − (n/2+1) members
	PickRandomMajority Pick = "random-majority" // n/2+1 members
	PickRandomOne      Pick = "random-one"      // one member
	PickHolder         Pick = "holder"          // the member client 0 talks to
)

// Fault is one scheduled fault: at At from the trial's start, or, with
// AfterFirst, right after client 0's first acquisition (before it writes).
type Fault struct {
	At         time.Duration // from the trial's start; 0 = before any client starts
	AfterFirst bool          // instead of At: right after client 0's first acquisition
	Pick       Pick          // which members
	Action     Action        // what happens to them
	Amount     time.Duration // the delay of DelayReplies, the length of Freeze
}

// Workload is what the clients of one trial do. Each client has its own
// etcd client and EtcdLocker (one session), talking to one member through a
// proxy of its own; client i talks to member (leader+1+i) mod n, so client 0
// (the holder in the scripted scenarios) starts on a follower. Each client
// repeatedly acquires the key, writes to both shared resources, works for
// Hold, and releases.
type Workload struct {
	Clients int           // number of clients (≥ 1)
	TTL     time.Duration // lease TTL, whole seconds
	Hold    time.Duration // work time while holding
	HoldOf  map[int]time.Duration
	Gap     time.Duration // pause between a release and the next Acquire (randomised up to 2×)
	// WriteEvery makes a holder write again every WriteEvery while it
	// works; 0 writes once, right after acquiring.
	WriteEvery time.Duration
	// MaxAcquires per client; 0 = no limit.
	MaxAcquires int
	// RivalsWait makes clients 1.. start only after client 0's first
	// acquisition.
	RivalsWait bool
	// Pause freezes client 0 after its first acquisition, before it writes,
	// like a GC pause: its goroutine sleeps and its traffic (including the
	// session's keep-alives, which in-process would otherwise go on) is
	// held for Pause.
	Pause time.Duration
	// AcquireTimeout bounds one Acquire; default 2 × TTL.
	AcquireTimeout time.Duration
}

// Scenario is one catalogue scenario as run on etcd: the chaos catalogue's
// name, what it becomes on etcd, and the verdicts expected without fencing
// (Expect) and for the fenced resource (ExpectFenced). A scenario with
// NotApplicable set is not run; the text says why.
type Scenario struct {
	Name          string             // the chaos catalogue's name, or an etcd-only one
	Summary       string             // what happens, on etcd
	NotApplicable string             // why the scenario cannot be run on etcd ("" = it runs)
	Expect        chaos.Verdict      // expected verdict without fencing (or SometimesUnsafe)
	ExpectFenced  chaos.Verdict      // expected verdict of the fenced resource
	Why           string             // the reason for the expected verdicts
	Workload      Workload           // what the clients do
	Faults        []Fault            // the fault schedule
	Duration      time.Duration      // length of one trial
	Availability  chaos.Availability // checked per trial; a miss makes the verdict Broken
	// NoneBefore: no acquisition may succeed before this offset from the
	// trial's start (while a majority is cut off), else the verdict is
	// Broken.
	NoneBefore time.Duration
	// Redlock names the chaos catalogue scenario this one mirrors ("" for
	// an etcd-only scenario).
	Redlock string
}

// SometimesUnsafe is an expected verdict for a scenario whose unsafety
// depends on the phase of timers (etcd's client sends keep-alives on a
// 500 ms loop and checks their deadline once a second): the run matches
// whether it observed Safe or Unsafe, Observed is Unsafe when any trial was,
// and Result.UnsafeTrials says how many were.
const SometimesUnsafe chaos.Verdict = "sometimes unsafe"

// The etcd catalogue's time scale: etcd leases are whole seconds, so the
// scenarios run about 3× slower than the chaos catalogue's 300 ms TTL.
const (
	etcdTTL     = time.Second
	etcdTrial   = 2 * time.Second
	scriptedFor = 3 * time.Second
)

// Catalogue returns the chaos catalogue's scenarios mapped to etcd, in the
// chaos catalogue's order, followed by the etcd-only ones.
func Catalogue() []Scenario {
	loop := func(clients int) Workload {
		return Workload{Clients: clients, TTL: etcdTTL, Hold: 5 * time.Millisecond, Gap: 2 * time.Millisecond}
	}
	// The holder (client 0) acquires once and works for 3 s, writing every
	// 50 ms while it believes it holds the lock; the rival starts after
	// the holder acquired and tries once.
	holderAndRival := Workload{
		Clients: 2, TTL: etcdTTL, Hold: 5 * time.Millisecond, MaxAcquires: 1, RivalsWait: true,
		HoldOf: map[int]time.Duration{0: scriptedFor}, WriteEvery: 50 * time.Millisecond,
		AcquireTimeout: 2 * scriptedFor,
	}
	pause := Workload{
		Clients: 2, TTL: etcdTTL, Hold: 5 * time.Millisecond, MaxAcquires: 1, RivalsWait: true,
		Pause: 5 * etcdTTL / 2, AcquireTimeout: 2 * scriptedFor,
	}
	// An acquisition through the slow member takes two late replies (the
	// lock, then its key's revision): give it time.
	slow := loop(4)
	slow.AcquireTimeout = 4 * etcdTTL
	// Attempts give up within the trial, so that failures are seen.
	unavailable := loop(3)
	unavailable.AcquireTimeout = etcdTTL / 2
	// A wall-clock step is not etcd's failure mode: a lease's expiry is
	// time.Now().Add(TTL) and its remaining time time.Until(expiry)
	// (server/v3/lease/lease.go), which Go computes on the monotonic clock,
	// and only the leader's lessor expires leases (lessor.go: isPrimary,
	// revokeExpiredLeases), refreshing them all when it takes over
	// (Promote). Nor could a preloaded clock library step it: Go's runtime
	// reads the clock through the vDSO, not libc.
	const clockNA = "not applicable: a wall-clock step is not etcd's failure mode. A lease expires on the leader's " +
		"monotonic clock (etcd's lease.go: expiry = time.Now().Add(TTL), remaining = time.Until(expiry), both " +
		"monotonic in Go; lessor.go: only the leader expires leases, and refreshes them all when it takes over), " +
		"and a preloaded clock library cannot reach a Go binary, whose runtime reads the clock through the vDSO. " +
		"Like Redlock's nodes, the leader must still measure time at about the right rate: a leader clock running " +
		"fast would expire leases early, which no in-process member can be made to do, so it is not measured"
	const amnesiaNA = "not applicable: a member restarted without its data cannot rejoin as itself " +
		"(raft panics: its log is behind what the leader knows it committed); the supported " +
		"path (member remove, wipe, member add) makes it a new member that catches up from " +
		"the leader before it counts, so a committed lock key is never forgotten by a majority"
	return []Scenario{
		{
			Name: "uncontended", Summary: "1 client takes the lock over and over, nothing fails (the latency of an uncontended acquisition)",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "one client",
			Workload: loop(1), Duration: etcdTrial, Availability: chaos.Available,
		},
		{
			Name: "no-faults", Redlock: "no-faults", Summary: "4 clients take turns on one key, nothing fails",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "the mutex key is granted in create-revision order by one linearizable store",
			Workload: loop(4), Duration: etcdTrial, Availability: chaos.Available,
		},
		{
			Name: "minority-killed", Redlock: "minority-killed", Summary: "a random member is killed mid-run (its clients lose their member)",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "two of three members still commit; the killed member's clients fail, the others go on",
			Workload: loop(4), Duration: 2 * etcdTrial, Availability: chaos.Available,
			Faults: []Fault{{At: etcdTrial / 2, Pick: PickRandomMinority, Action: Kill}},
		},
		{
			Name: "majority-killed", Redlock: "majority-killed", Summary: "two of three members are down from the start",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "nothing can commit without a majority, so no lock is granted",
			Workload: unavailable, Duration: etcdTrial, Availability: chaos.Unavailable,
			Faults: []Fault{{Pick: PickRandomMajority, Action: Kill}},
		},
		{
			Name: "minority-partition", Redlock: "minority-partition", Summary: "a random member is cut off from its peers and its clients",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "the majority side commits alone; the cut-off member's clients time out",
			Workload: loop(4), Duration: 2 * etcdTrial, Availability: chaos.Available,
			Faults: []Fault{{Pick: PickRandomMinority, Action: Partition}},
		},
		{
			Name: "lost-replies", Redlock: "lost-replies", Summary: "a random member executes its clients' requests but their replies are lost",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "a lock key granted unseen blocks the others until its lease expires; nobody acts on it",
			Workload: loop(4), Duration: 2 * etcdTrial, Availability: chaos.Available,
			Faults: []Fault{{Pick: PickRandomMinority, Action: DropReplies}},
		},
		{
			Name: "slow-node", Redlock: "slow-node", Summary: "one member answers its clients 1 s late",
			Expect: SometimesUnsafe, ExpectFenced: chaos.Safe,
			Why:      "a late reply delays when a client learns it holds the lock, while the others wait for it; and a client whose replies are late renews its lease less often than its TTL (see delayed-replies), so it may act on a lock whose lease already lapsed",
			Workload: slow, Duration: 2 * etcdTrial, Availability: chaos.Available,
			Faults: []Fault{{Pick: PickRandomOne, Action: DelayReplies, Amount: time.Second}},
		},
		{
			Name: "paused-node", Redlock: "paused-node", Summary: "a random member freezes for 1.5 s (isolated, its clients' traffic held), then runs what queued",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "queued requests are proposed to the current leader after the freeze; raft orders them",
			Workload: loop(4), Duration: etcdTrial, Availability: chaos.Available,
			Faults: []Fault{{At: etcdTrial / 7, Pick: PickRandomMinority, Action: Freeze, Amount: 3 * etcdTTL / 2}},
		},
		{
			Name: "contention-16", Redlock: "contention-16", Summary: "16 clients contend for one key",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "waiters queue by create revision; no split votes",
			Workload: loop(16), Duration: 2 * etcdTrial, Availability: chaos.Available,
		},
		{
			Name: "delayed-replies", Redlock: "delayed-replies", Summary: "right after the holder acquired, its replies are delayed 900 ms, just under the 1 s TTL; it works 3 s, writing every 50 ms while its session lives",
			Expect: SometimesUnsafe, ExpectFenced: chaos.Safe,
			Why:      "etcd's client sends a keep-alive only when the last reply is older than TTL/3, on a 500 ms loop, and counts its deadline from a reply's arrival: with 900 ms replies the lease goes unrenewed for 1.5 s and lapses, the rival acquires, and the holder's session still looks alive until its deadline check (once a second) or a late reply says the lease is gone. Redlock counts validity from before its request: in its delayed-replies the holder's replies from a majority are late from its first request, it is granted only TTL − delay − drift, stops before its keys expire, and the rival takes the key after it",
			Workload: holderAndRival, Duration: scriptedFor + etcdTTL, Availability: chaos.Available,
			Faults: []Fault{{AfterFirst: true, Pick: PickHolder, Action: DelayReplies, Amount: etcdTTL - 100*time.Millisecond}},
		},
		{
			Name: "client-pause", Redlock: "client-pause", Summary: "the holder freezes for 2.5 s (TTL 1 s; its traffic held) after acquiring, then writes",
			Expect: chaos.Unsafe, ExpectFenced: chaos.Safe, Why: "the lease expires during the pause and the rival acquires; the stale holder still writes. Only the fenced resource (create revision) rejects it",
			Workload: pause, Duration: 4 * etcdTTL, Availability: chaos.Available,
		},
		{Name: "amnesia-unguarded", Redlock: "amnesia-unguarded", NotApplicable: amnesiaNA},
		{Name: "amnesia-guarded", Redlock: "amnesia-guarded", NotApplicable: amnesiaNA},
		{Name: "churn-guarded", Redlock: "churn-guarded", NotApplicable: "not applicable: the amnesia restarts are (see amnesia-unguarded); the kills alone are minority-killed"},
		{Name: "clock-jump", Redlock: "clock-jump", NotApplicable: clockNA},
		{Name: "clock-fast", Redlock: "clock-fast", NotApplicable: clockNA},
		{Name: "clock-drift-in-budget", Redlock: "clock-drift-in-budget", NotApplicable: clockNA},
		{Name: "long-holds", Redlock: "long-holds", NotApplicable: "not applicable: an etcd Session keeps its lease alive by itself in every scenario here; Do and KeepAlive are Redlock's way to do the same"},
		{
			Name: "majority-partition", Redlock: "majority-partition", Summary: "a random majority of members (two of three) is cut off from its peers and its clients for the first third of the run, then the cut heals",
			Expect: chaos.Safe, ExpectFenced: chaos.Safe, Why: "no member hears a majority, so nothing commits and no lock is granted while the cut lasts (any acquisition before it heals is a failure); after it, a leader is elected and locks are granted again",
			Workload: loop(3), Duration: 3 * etcdTrial, Availability: chaos.Available, NoneBefore: etcdTrial,
			Faults: []Fault{{Pick: PickRandomMajority, Action: Cut, Amount: etcdTrial}},
		},
		{Name: "asymmetric-partition", Redlock: "asymmetric-partition", NotApplicable: "not applicable as such: an etcd client talks to one member, so one client losing a majority of the nodes is holder-partitioned below"},
		{
			Name: "holder-partitioned", Summary: "right after the holder acquired, its member is cut off from its peers; the holder writes every 50 ms while it believes it holds the lock",
			Expect: SometimesUnsafe, ExpectFenced: chaos.Safe,
			Why:      "the majority lets the holder's lease expire and grants the rival; the holder learns only when its keep-alive deadline passes (checked once a second), so it often writes after the rival has the lock; whether it does depends on where that check falls. Only the fenced resource rejects those writes",
			Workload: holderAndRival, Duration: scriptedFor + etcdTTL, Availability: chaos.Available,
			Faults: []Fault{{AfterFirst: true, Pick: PickHolder, Action: Isolate}},
		},
		{Name: "late-extension", Redlock: "late-extension", NotApplicable: "not applicable: it tests the owner check of Redlock's extend script; an etcd holder never extends its lock itself, its Session keeps the lease alive"},
		{Name: "clock-back-amnesia", Redlock: "clock-back-amnesia", NotApplicable: clockNA},
		{Name: "election-turns", Redlock: "election-turns", NotApplicable: "not applicable here: it is the Redlock leader election's scenario; etcd's concurrency.Election was not compared"},
		{Name: "leader-isolated", Redlock: "leader-isolated", NotApplicable: "not applicable here: it is the Redlock leader election's scenario; etcd's concurrency.Election was not compared"},
		{Name: "exec-asymmetric-partition", Redlock: "exec-asymmetric-partition", NotApplicable: "not applicable: it tests how redlock exec stops its job when the lock is lost, and etcd has no redlock exec; the lock itself is covered by holder-partitioned"},
	}
}

// Find returns the etcd scenario with the given name.
func Find(name string) (Scenario, bool) {
	for _, s := range Catalogue() {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Result is the outcome of running one scenario on etcd for some trials.
// Observed judges the unfenced resource and the availability check as the
// chaos harness does (chaos.Result); ObservedFenced is Safe when the fenced
// resource accepted no stale write in any trial, else Unsafe. TokenOrder
// counts holds whose token was not above the previous holder's, in the
// order the clients learned of their acquisitions: a client that learns late
// (its reply held) may hold a lower token than a holder that came and went
// meanwhile; the fenced resource then rejects its writes.
type Result struct {
	Scenario       string        // Scenario.Name
	Trials         int           // trials run
	Seed           uint64        // the run's seed (trial seeds derive from it)
	Expect         chaos.Verdict // Scenario.Expect
	ExpectFenced   chaos.Verdict // Scenario.ExpectFenced
	Observed       chaos.Verdict // the unfenced verdict over all trials
	ObservedFenced chaos.Verdict // Safe unless the fenced resource accepted a stale write
	Skipped        string        // Scenario.NotApplicable, when it was not run
	Notes          []string      // per-trial reasons and observations
	// UnsafeTrials counts the trials judged unsafe.
	UnsafeTrials int
	// Sums over the trials, as in oracle.Report: successful and failed
	// acquisitions, mutual-exclusion violations, and of these the ones
	// where both holders believed they held the lock (not only a write
	// after the belief ended).
	Acquisitions, Failed, Violations, BelievedViolations int
	// Sums over the trials: stale writes accepted by the plain and the
	// fenced resource, writes the fenced resource rejected, and holds whose
	// token was not above the previous holder's.
	StalePlain, StaleFenced, RejectedFenced, TokenOrder int
	P50, P99                                            time.Duration    // successful acquisitions' latency, all trials
	Reports                                             []oracle.Report  // per trial
	Histories                                           []oracle.History // per trial, for timelines (internal/timeline)
}

// Match reports whether both observed verdicts are the expected ones (a
// skipped scenario matches).
func (r Result) Match() bool {
	if r.Skipped != "" {
		return true
	}
	observed := r.Observed == r.Expect ||
		(r.Expect == SometimesUnsafe && (r.Observed == chaos.Safe || r.Observed == chaos.Unsafe))
	return observed && r.ObservedFenced == r.ExpectFenced
}

// trialSeed derives one trial's seed from the run's seed.
func trialSeed(seed uint64, scenario string, trial int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "etcd/%d/%s/%d", seed, scenario, trial)
	return h.Sum64()
}

// Run runs s for trials trials, each on a fresh 3-member cluster, and
// aggregates the result as chaos.Run does: an expected-unsafe scenario is
// reported unsafe only if every trial showed it. progress, if not nil, gets
// a line per trial. It returns an error only when the harness itself fails
// (a cluster does not start).
func Run(ctx context.Context, s Scenario, trials int, seed uint64, progress func(string)) (Result, error) {
	res := Result{Scenario: s.Name, Trials: trials, Seed: seed, Expect: s.Expect, ExpectFenced: s.ExpectFenced}
	if s.NotApplicable != "" {
		res.Skipped = s.NotApplicable
		return res, nil
	}
	if trials < 1 {
		return res, fmt.Errorf("%w: %d trials", ErrInvalidArgument, trials)
	}
	var latencies []time.Duration
	verdicts := map[chaos.Verdict]int{}
	fencedOK := true
	for trial := range trials {
		tseed := trialSeed(seed, s.Name, trial)
		tr, err := runTrial(ctx, s, tseed)
		if err != nil {
			return res, fmt.Errorf("etcdcompare: %s trial %d: %w", s.Name, trial+1, err)
		}
		rep := tr.report
		res.Reports = append(res.Reports, rep)
		res.Histories = append(res.Histories, tr.history)
		res.Acquisitions += rep.Acquisitions
		res.Failed += rep.FailedAcquires
		res.Violations += rep.Violations
		res.BelievedViolations += rep.BelievedViolations
		res.StalePlain += rep.StaleWritesPlain
		res.StaleFenced += rep.StaleWritesFenced
		res.RejectedFenced += rep.RejectedWritesFenced
		res.TokenOrder += rep.TokenOrderViolations
		for _, h := range tr.history.Holds {
			latencies = append(latencies, h.Latency)
		}
		if rep.StaleWritesFenced > 0 {
			fencedOK = false
		}
		v, notes := judge(s, rep, tr.history)
		verdicts[v]++
		for _, n := range notes {
			res.Notes = append(res.Notes, fmt.Sprintf("trial %d: %s", trial+1, n))
		}
		if progress != nil {
			progress(fmt.Sprintf("%-20s trial %d/%d seed %d: %s (%d acquisitions, %d violations, stale plain/fenced %d/%d)",
				s.Name, trial+1, trials, tseed, v, rep.Acquisitions, rep.Violations, rep.StaleWritesPlain, rep.StaleWritesFenced))
		}
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
	}
	switch {
	case verdicts[chaos.Broken] > 0:
		res.Observed = chaos.Broken
	case verdicts[chaos.Unsafe] > 0 && s.Expect == chaos.Unsafe && verdicts[chaos.Safe] > 0:
		res.Observed = chaos.Safe
		res.Notes = append(res.Notes, fmt.Sprintf("unsafe in %d of %d trials only", verdicts[chaos.Unsafe], trials))
	case verdicts[chaos.Unsafe] > 0:
		res.Observed = chaos.Unsafe
	default:
		res.Observed = chaos.Safe
	}
	res.UnsafeTrials = verdicts[chaos.Unsafe]
	res.ObservedFenced = chaos.Safe
	if !fencedOK {
		res.ObservedFenced = chaos.Unsafe
	}
	res.P50, res.P99 = oracle.Percentile(latencies, 50), oracle.Percentile(latencies, 99)
	return res, nil
}

// judge gives one trial's unfenced verdict: Broken when the availability
// check failed, else Unsafe on an overlap or an accepted stale plain write,
// else Safe. Fenced stale writes and token order are noted; Run turns them
// into ObservedFenced.
func judge(s Scenario, rep oracle.Report, hist oracle.History) (chaos.Verdict, []string) {
	var notes []string
	broken := false
	switch {
	case s.Availability == chaos.Available && rep.Acquisitions == 0:
		notes, broken = append(notes, "no acquisition succeeded, but the scenario expects some"), true
	case s.Availability == chaos.Unavailable && rep.Acquisitions > 0:
		notes, broken = append(notes, fmt.Sprintf("%d acquisitions succeeded, but none may", rep.Acquisitions)), true
	}
	for _, h := range hist.Holds {
		if s.NoneBefore > 0 && h.Acquired < s.NoneBefore {
			notes = append(notes, fmt.Sprintf("a lock was acquired at %v, before the majority was reachable (%v)", h.Acquired.Round(time.Millisecond), s.NoneBefore))
			broken = true
			break
		}
	}
	if rep.StaleWritesFenced > 0 {
		notes = append(notes, fmt.Sprintf("%d stale writes accepted by the fenced resource", rep.StaleWritesFenced))
	}
	if rep.TokenOrderViolations > 0 {
		notes = append(notes, fmt.Sprintf("%d fencing tokens out of holder order", rep.TokenOrderViolations))
	}
	switch {
	case broken:
		return chaos.Broken, notes
	case rep.Violations > 0 || rep.StaleWritesPlain > 0:
		return chaos.Unsafe, notes
	}
	return chaos.Safe, notes
}

// env is one trial's world: the cluster, and per client its proxy, etcd
// client and locker.
type env struct {
	cluster *Cluster
	member  []int // member[i]: the member client i talks to
	proxies []*chaos.Proxy
	clients []*clientv3.Client
	lockers []*EtcdLocker

	closeOnce sync.Once
}

// newEnv starts a cluster and connects the workload's clients, each
// creating its session before any fault (as a running service would have).
func newEnv(ctx context.Context, w Workload) (*env, error) {
	if w.Clients < 1 {
		return nil, fmt.Errorf("%w: workload needs at least one client, got %d", ErrInvalidArgument, w.Clients)
	}
	secs, err := ttlSeconds(w.TTL)
	if err != nil {
		return nil, err
	}
	c, err := StartCluster(ctx, 3)
	if err != nil {
		return nil, err
	}
	e := &env{cluster: c}
	lead := c.Leader()
	for i := range w.Clients {
		m := (max(lead, 0) + 1 + i) % c.Size()
		p, err := chaos.NewProxy(c.Member(m).ClientAddr())
		if err != nil {
			e.close()
			return nil, err
		}
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{p.Addr()},
			DialTimeout: 2 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			p.Close()
			e.close()
			return nil, err
		}
		e.member = append(e.member, m)
		e.proxies = append(e.proxies, p)
		e.clients = append(e.clients, cli)
		e.lockers = append(e.lockers, NewEtcdLocker(cli, "/chaos"))
	}
	var wg sync.WaitGroup
	errs := make([]error, w.Clients)
	for i, l := range e.lockers {
		wg.Go(func() {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, errs[i] = l.sessionFor(sctx, secs)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		e.close()
		return nil, fmt.Errorf("etcdcompare: warm up sessions: %w", err)
	}
	return e, nil
}

// proxiesOf returns the proxies of the clients talking to member m.
func (e *env) proxiesOf(m int) []*chaos.Proxy {
	var out []*chaos.Proxy
	for i, p := range e.proxies {
		if e.member[i] == m {
			out = append(out, p)
		}
	}
	return out
}

// close ends the sessions (revoking their leases where a member can be
// reached, bounded by the TTL), the clients, the proxies and the cluster.
func (e *env) close() {
	for _, p := range e.proxies {
		p.Heal()
	}
	var wg sync.WaitGroup
	for _, l := range e.lockers {
		wg.Go(func() { _ = l.Close() })
	}
	wg.Wait()
	e.closeClients()
	for _, p := range e.proxies {
		_ = p.Close()
	}
	_ = e.cluster.Close()
}

// closeClients closes every etcd client once; calls waiting on them fail.
func (e *env) closeClients() {
	e.closeOnce.Do(func() {
		for _, c := range e.clients {
			_ = c.Close()
		}
	})
}

type trialResult struct {
	report  oracle.Report
	history oracle.History
}

// runTrial runs one trial of s on a fresh cluster.
func runTrial(ctx context.Context, s Scenario, seed uint64) (trialResult, error) {
	e, err := newEnv(ctx, s.Workload)
	if err != nil {
		return trialResult{}, err
	}
	defer e.close()
	o := oracle.NewOracle()
	o.Declare(s.Workload.Clients, e.cluster.Size())
	inj := &injector{env: e, oracle: o, log: faultlog.New(o), rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	tctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()

	var after []Fault
	for _, f := range s.Faults {
		switch {
		case f.AfterFirst:
			after = append(after, f)
		case f.At == 0:
			inj.apply(tctx, f)
		default:
			inj.schedule(tctx, f.At, func() { inj.apply(tctx, f) })
		}
	}
	onFirst := func() {
		for _, f := range after {
			inj.apply(tctx, f)
		}
	}
	// concurrency.Mutex.Lock, when its context ends while it waits, deletes
	// its key under the client's own context: with the member unreachable
	// that blocks until the client is closed. So the trial's end closes the
	// clients, which unblocks every call still waiting.
	stopClients := context.AfterFunc(tctx, e.closeClients)
	defer stopClients()
	s.Workload.run(tctx, e, o, new(fencing.Register), seed, onFirst)
	cancel()
	inj.stop()
	return trialResult{report: o.Report(), history: o.History()}, nil
}

// injector applies one trial's faults and records them in the oracle. The
// schedule and the bands in force are the chaos harness's (faultlog); the
// faults themselves act on etcd members and on the clients' proxies.
type injector struct {
	env    *env
	oracle *oracle.Oracle
	log    *faultlog.Log

	mu  sync.Mutex
	rng *rand.Rand
}

func (inj *injector) schedule(ctx context.Context, d time.Duration, fn func()) {
	inj.log.After(ctx, d, fn)
}

// stop cancels pending faults, waits for running ones and closes the fault
// bands still open at the trial's end.
func (inj *injector) stop() { inj.log.Stop() }

func (inj *injector) pick(p Pick) []int {
	n := inj.env.cluster.Size()
	random := func(k int) []int {
		inj.mu.Lock()
		perm := inj.rng.Perm(n)
		inj.mu.Unlock()
		out := perm[:min(k, n)]
		slices.Sort(out)
		return out
	}
	switch p {
	case PickRandomMinority:
		return random(n - (n/2 + 1))
	case PickRandomMajority:
		return random(n/2 + 1)
	case PickRandomOne:
		return random(1)
	case PickHolder:
		return []int{inj.env.member[0]}
	}
	return nil
}

// apply applies f now. Faults are undone by the trial's end (the cluster is
// thrown away), except Freeze, which ends after its Amount.
func (inj *injector) apply(ctx context.Context, f Fault) {
	for _, m := range inj.pick(f.Pick) {
		now := time.Now()
		label := string(f.Action)
		switch f.Action {
		case Kill:
			_ = inj.env.cluster.Kill(m)
			for _, p := range inj.env.proxiesOf(m) {
				_ = p.Down()
			}
			label = "killed"
		case Isolate:
			_ = inj.env.cluster.Isolate(m)
			label = "cut from peers"
		case Partition:
			_ = inj.env.cluster.Isolate(m)
			for _, p := range inj.env.proxiesOf(m) {
				p.DropRequests(true)
				p.DropReplies(true)
			}
			label = "partitioned"
		case DropReplies:
			for _, p := range inj.env.proxiesOf(m) {
				p.DropReplies(true)
			}
			label = "replies lost"
		case DelayReplies:
			for _, p := range inj.env.proxiesOf(m) {
				p.DelayReplies(f.Amount)
			}
			label = "replies +" + f.Amount.String()
		case Freeze, Cut:
			_ = inj.env.cluster.Isolate(m)
			ps := inj.env.proxiesOf(m)
			for _, p := range ps {
				p.Hold(true)
			}
			label = "frozen"
			if f.Action == Cut {
				label = "partitioned"
			}
			inj.oracle.Fault(m, label, now, now.Add(f.Amount))
			inj.schedule(ctx, f.Amount, func() {
				_ = inj.env.cluster.Rejoin(m)
				for _, p := range ps {
					p.Hold(false)
				}
			})
			continue
		}
		inj.log.Open(faultlog.Band{Node: m, What: label}, now)
	}
}

// run runs the workload until ctx ends or every client is done.
func (w Workload) run(ctx context.Context, e *env, o *oracle.Oracle, fenced *fencing.Register, seed uint64, onFirst func()) {
	first := make(chan struct{})
	var firstOnce sync.Once
	fire := func() {
		firstOnce.Do(func() {
			onFirst()
			close(first)
		})
	}
	var wg sync.WaitGroup
	for i := range w.Clients {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		wg.Go(func() {
			if i > 0 && w.RivalsWait {
				select {
				case <-first:
				case <-ctx.Done():
					return
				}
			}
			w.client(ctx, i, e, o, fenced, rng, fire)
		})
	}
	wg.Wait()
}

// client is one client's loop.
func (w Workload) client(ctx context.Context, i int, e *env, o *oracle.Oracle, fenced *fencing.Register, rng *rand.Rand, fire func()) {
	acquireTimeout := w.AcquireTimeout
	if acquireTimeout <= 0 {
		acquireTimeout = 2 * w.TTL
	}
	deadline, _ := ctx.Deadline()
	name := "client " + strconv.Itoa(i)
	for n := 1; ctx.Err() == nil && (w.MaxAcquires == 0 || n <= w.MaxAcquires); {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		start := time.Now()
		h, err := e.lockers[i].Acquire(actx, "lock", w.TTL)
		cancel()
		latency := time.Since(start)
		if err != nil {
			if ctx.Err() == nil {
				o.Failed(i, time.Now(), latency, 1, err.Error())
				// A failure that returned at once (a refused dial) must
				// not spin.
				sleepCtx(ctx, 10*time.Millisecond)
			}
			continue
		}
		// The holder believes it holds the lock from now until it releases
		// or learns that its session is gone; the oracle sees the latter
		// as a release (belief ended), and the trial's end bounds both.
		hold := o.Acquired(i, h.Token(), time.Now(), deadline, latency, 1)
		released := make(chan struct{})
		var watch sync.WaitGroup
		watch.Go(func() {
			select {
			case <-h.Done():
				at := time.Now()
				o.Released(hold, at)
				o.Note(at, name+" learns its session is gone")
			case <-released:
			}
		})
		if i == 0 && n == 1 {
			fire()
		}
		if i == 0 && n == 1 && w.Pause > 0 {
			// A process pause stops every goroutine, the session's
			// keep-alive too: hold the client's traffic as well.
			o.Note(time.Now(), name+" paused "+w.Pause.String())
			e.proxies[i].Hold(true)
			sleepCtx(ctx, w.Pause)
			e.proxies[i].Hold(false)
		}
		// Both shared resources, as in the chaos harness: the plain one
		// accepts every write, the fenced one is fencing.Register.
		write := func() {
			at := time.Now()
			o.Wrote(hold, oracle.ResourcePlain, h.Token(), true, at)
			at = time.Now()
			o.Wrote(hold, oracle.ResourceFenced, h.Token(), fenced.Check(h.Token()) == nil, at)
		}
		// The first write follows the acquisition (or the pause) without a
		// check, as a paused process resumes mid-step.
		write()
		holdFor := w.Hold
		if d, ok := w.HoldOf[i]; ok {
			holdFor = d
		}
		w.work(ctx, h, holdFor, write)
		o.Released(hold, time.Now())
		close(released)
		watch.Wait()
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), w.TTL)
		_ = h.Release(rctx)
		rcancel()
		n++
		if w.Gap > 0 {
			sleepCtx(ctx, w.Gap+time.Duration(rng.Int64N(int64(w.Gap)+1)))
		}
	}
}

// work holds the lock for d, stopping early when the session is lost (a
// careful holder), writing every WriteEvery if set.
func (w Workload) work(ctx context.Context, h Held, d time.Duration, write func()) {
	end := time.NewTimer(d)
	defer end.Stop()
	var tick <-chan time.Time
	if w.WriteEvery > 0 {
		t := time.NewTicker(w.WriteEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-h.Done():
			return
		case <-tick:
			select {
			case <-h.Done():
				return
			default:
			}
			write()
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
