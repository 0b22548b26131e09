package etcdcompare

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/d3b93e30/redlock/chaos"
)

// ActionIsolate cuts an etcd member off from its peers (Cluster.Isolate);
// its clients still reach it. The chaos harness's actions act on etcd
// members as follows ("its clients" are the workload clients that talk to
// the member, each through a proxy of its own):
//
//   - chaos.ActionKill isolates the member and stops it for the rest of the
//     trial (Cluster.Kill); its clients' dials are refused.
//   - chaos.ActionPartition isolates the member and loses its clients'
//     traffic both ways: it is cut off from everyone. With Fault.For the
//     partition heals: for that long the clients' traffic is held, not
//     lost, and delivered when the cut ends, as TCP retransmits what a short
//     partition dropped (losing bytes would break the gRPC streams, which
//     real partitions do not do); then the member rejoins.
//   - chaos.ActionDropReplies loses every reply the member sends to its
//     clients; the member still executes their requests.
//   - chaos.ActionDelayReplies delays every reply to its clients by Amount.
//   - chaos.ActionPause is the closest in-process equivalent of SIGSTOP: for
//     Amount the member is isolated and its clients' traffic is held, then
//     everything queued is delivered.
//
// chaos.PickGranted picks the member the acquiring client talks to. Other
// actions are not supported (chaos.ErrUnsupported).
const ActionIsolate chaos.Action = "isolate"

// Scenario is one catalogue scenario as run on etcd: a chaos scenario (the
// chaos catalogue's name, what it becomes on etcd, with the verdict expected
// without fencing in Expect, or SometimesUnsafe), the verdict expected of the
// fenced resource (ExpectFenced), and the chaos catalogue scenario it mirrors
// (Redlock, "" for an etcd-only one). A scenario with NotApplicable set is
// not run; the text says why. Each trial runs on a fresh 3-member cluster
// (its nodes are the members); client i talks to member (leader+1+i) mod 3,
// so client 0 (the holder in the scripted scenarios) starts on a follower.
// Fenced stale writes and token order do not make the verdict Broken: they
// are judged apart, by ExpectFenced.
type Scenario struct {
	chaos.Scenario
	NotApplicable string        // why the scenario cannot be run on etcd ("" = it runs)
	ExpectFenced  chaos.Verdict // expected verdict of the fenced resource
	Redlock       string        // the chaos catalogue scenario this one mirrors
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
	loop := func(clients int) chaos.Workload {
		return chaos.Workload{Clients: clients, Key: "lock", TTL: etcdTTL, Hold: 5 * time.Millisecond, Gap: 2 * time.Millisecond}
	}
	// The holder (client 0) acquires once and works for 3 s, writing every
	// 50 ms while it believes it holds the lock; the rival starts after
	// the holder acquired and tries once.
	afterA := &chaos.Trigger{Client: 0, Nth: 1}
	holderAndRival := chaos.Workload{
		Clients: 2, Key: "lock", TTL: etcdTTL, Hold: 5 * time.Millisecond, MaxAcquires: 1, StartOn: map[int]chaos.Trigger{1: *afterA},
		HoldOf: map[int]time.Duration{0: scriptedFor}, WriteEvery: 50 * time.Millisecond,
		AcquireTimeout: 2 * scriptedFor,
	}
	pause := chaos.Workload{
		Clients: 2, Key: "lock", TTL: etcdTTL, Hold: 5 * time.Millisecond, MaxAcquires: 1, StartOn: map[int]chaos.Trigger{1: *afterA},
		Pause: &chaos.Pause{Client: 0, Nth: 1, Length: 5 * etcdTTL / 2}, AcquireTimeout: 2 * scriptedFor,
	}
	// An acquisition through the slow member takes two late replies (the
	// lock, then its key's revision): give it time.
	slow := loop(4)
	slow.AcquireTimeout = 4 * etcdTTL
	// Attempts give up within the trial, so that failures are seen.
	unavailable := loop(3)
	unavailable.AcquireTimeout = etcdTTL / 2
	minority := chaos.NodeSet{Pick: chaos.PickRandomMinority}
	majority := chaos.NodeSet{Pick: chaos.PickRandomMajority}
	holder := chaos.NodeSet{Pick: chaos.PickGranted} // the member client 0 talks to
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
	const dataLossNA = "not applicable: an etcd member has no command that empties its data or " +
		"rolls it back while it keeps its place in the cluster; a member with a lost or stale " +
		"log is removed and added back as a new member (see amnesia-unguarded)"
	const amnesiaNA = "not applicable: a member restarted without its data cannot rejoin as itself " +
		"(raft panics: its log is behind what the leader knows it committed); the supported " +
		"path (member remove, wipe, member add) makes it a new member that catches up from " +
		"the leader before it counts, so a committed lock key is never forgotten by a majority"
	return []Scenario{
		{
			Scenario: chaos.Scenario{
				Name: "uncontended", Summary: "1 client takes the lock over and over, nothing fails (the latency of an uncontended acquisition)",
				Expect: chaos.Safe, Why: "one client",
				Workload: loop(1), Duration: etcdTrial, Availability: chaos.Available,
			},
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "no-faults", Summary: "4 clients take turns on one key, nothing fails",
				Expect: chaos.Safe, Why: "the mutex key is granted in create-revision order by one linearizable store",
				Workload: loop(4), Duration: etcdTrial, Availability: chaos.Available,
			},
			Redlock:      "no-faults",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "minority-killed", Summary: "a random member is killed mid-run (its clients lose their member)",
				Expect: chaos.Safe, Why: "two of three members still commit; the killed member's clients fail, the others go on",
				Workload: loop(4), Duration: 2 * etcdTrial, Availability: chaos.Available,
				Faults: []chaos.Fault{{At: etcdTrial / 2, Nodes: minority, Action: chaos.ActionKill}},
			},
			Redlock:      "minority-killed",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "majority-killed", Summary: "two of three members are down from the start",
				Expect: chaos.Safe, Why: "nothing can commit without a majority, so no lock is granted",
				Workload: unavailable, Duration: etcdTrial, Availability: chaos.Unavailable,
				Faults: []chaos.Fault{{Nodes: majority, Action: chaos.ActionKill}},
			},
			Redlock:      "majority-killed",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "minority-partition", Summary: "a random member is cut off from its peers and its clients",
				Expect: chaos.Safe, Why: "the majority side commits alone; the cut-off member's clients time out",
				Workload: loop(4), Duration: 2 * etcdTrial, Availability: chaos.Available,
				Faults: []chaos.Fault{{Nodes: minority, Action: chaos.ActionPartition}},
			},
			Redlock:      "minority-partition",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "lost-replies", Summary: "a random member executes its clients' requests but their replies are lost",
				Expect: chaos.Safe, Why: "a lock key granted unseen blocks the others until its lease expires; nobody acts on it",
				Workload: loop(4), Duration: 2 * etcdTrial, Availability: chaos.Available,
				Faults: []chaos.Fault{{Nodes: minority, Action: chaos.ActionDropReplies}},
			},
			Redlock:      "lost-replies",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "slow-node", Summary: "one member answers its clients 1 s late",
				Expect: SometimesUnsafe, Why: "a late reply delays when a client learns it holds the lock, while the others wait for it; and a client whose replies are late renews its lease less often than its TTL (see delayed-replies), so it may act on a lock whose lease already lapsed",
				Workload: slow, Duration: 2 * etcdTrial, Availability: chaos.Available,
				Faults: []chaos.Fault{{Nodes: chaos.NodeSet{Pick: chaos.PickRandom, Count: 1}, Action: chaos.ActionDelayReplies, Amount: time.Second}},
			},
			Redlock:      "slow-node",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "paused-node", Summary: "a random member freezes for 1.5 s (isolated, its clients' traffic held), then runs what queued",
				Expect: chaos.Safe, Why: "queued requests are proposed to the current leader after the freeze; raft orders them",
				Workload: loop(4), Duration: etcdTrial, Availability: chaos.Available,
				Faults: []chaos.Fault{{At: etcdTrial / 7, Nodes: minority, Action: chaos.ActionPause, Amount: 3 * etcdTTL / 2}},
			},
			Redlock:      "paused-node",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "contention-16", Summary: "16 clients contend for one key",
				Expect: chaos.Safe, Why: "waiters queue by create revision; no split votes",
				Workload: loop(16), Duration: 2 * etcdTrial, Availability: chaos.Available,
			},
			Redlock:      "contention-16",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "delayed-replies", Summary: "right after the holder acquired, its replies are delayed 900 ms, just under the 1 s TTL; it works 3 s, writing every 50 ms while its session lives",
				Expect: SometimesUnsafe, Why: "etcd's client sends a keep-alive only when the last reply is older than TTL/3, on a 500 ms loop, and counts its deadline from a reply's arrival: with 900 ms replies the lease goes unrenewed for 1.5 s and lapses, the rival acquires, and the holder's session still looks alive until its deadline check (once a second) or a late reply says the lease is gone. Redlock counts validity from before its request: in its delayed-replies the holder's replies from a majority are late from its first request, it is granted only TTL − delay − drift, stops before its keys expire, and the rival takes the key after it",
				Workload: holderAndRival, Duration: scriptedFor + etcdTTL, Availability: chaos.Available,
				Faults: []chaos.Fault{{On: afterA, Nodes: holder, Action: chaos.ActionDelayReplies, Amount: etcdTTL - 100*time.Millisecond}},
			},
			Redlock:      "delayed-replies",
			ExpectFenced: chaos.Safe,
		},
		{
			Scenario: chaos.Scenario{
				Name: "client-pause", Summary: "the holder freezes for 2.5 s (TTL 1 s; its traffic held) after acquiring, then writes",
				Expect: chaos.Unsafe, Why: "the lease expires during the pause and the rival acquires; the stale holder still writes. Only the fenced resource (create revision) rejects it",
				Workload: pause, Duration: 4 * etcdTTL, Availability: chaos.Available,
			},
			Redlock:      "client-pause",
			ExpectFenced: chaos.Safe,
		},
		{Scenario: chaos.Scenario{Name: "amnesia-unguarded"}, Redlock: "amnesia-unguarded", NotApplicable: amnesiaNA},
		{Scenario: chaos.Scenario{Name: "amnesia-guarded"}, Redlock: "amnesia-guarded", NotApplicable: amnesiaNA},
		{Scenario: chaos.Scenario{Name: "amnesia-two-restarts"}, Redlock: "amnesia-two-restarts", NotApplicable: amnesiaNA},
		{Scenario: chaos.Scenario{Name: "flush-then-restart"}, Redlock: "flush-then-restart", NotApplicable: dataLossNA},
		{Scenario: chaos.Scenario{Name: "stale-restarts"}, Redlock: "stale-restarts", NotApplicable: dataLossNA},
		{Scenario: chaos.Scenario{Name: "node-replaced"}, Redlock: "node-replaced", NotApplicable: amnesiaNA},
		{Scenario: chaos.Scenario{Name: "key-evicted"}, Redlock: "key-evicted", NotApplicable: "not applicable: etcd never evicts a key; a member out of space refuses writes (NOSPACE) instead"},
		{Scenario: chaos.Scenario{Name: "majority-flushed"}, Redlock: "majority-flushed", NotApplicable: dataLossNA},
		{Scenario: chaos.Scenario{Name: "churn-guarded"}, Redlock: "churn-guarded", NotApplicable: "not applicable: the amnesia restarts are (see amnesia-unguarded); the kills alone are minority-killed"},
		{Scenario: chaos.Scenario{Name: "clock-jump"}, Redlock: "clock-jump", NotApplicable: clockNA},
		{Scenario: chaos.Scenario{Name: "clock-fast"}, Redlock: "clock-fast", NotApplicable: clockNA},
		{Scenario: chaos.Scenario{Name: "clock-drift-in-budget"}, Redlock: "clock-drift-in-budget", NotApplicable: clockNA},
		{Scenario: chaos.Scenario{Name: "long-holds"}, Redlock: "long-holds", NotApplicable: "not applicable: an etcd Session keeps its lease alive by itself in every scenario here; Do and KeepAlive are Redlock's way to do the same"},
		{
			Scenario: chaos.Scenario{
				Name: "majority-partition", Summary: "a random majority of members (two of three) is cut off from its peers and its clients for the first third of the run, then the cut heals",
				Expect: chaos.Safe, Why: "no member hears a majority, so nothing commits and no lock is granted while the cut lasts (any acquisition before it heals is a failure); after it, a leader is elected and locks are granted again",
				Workload: loop(3), Duration: 3 * etcdTrial, Availability: chaos.Available, NoneBefore: etcdTrial,
				Faults: []chaos.Fault{{Nodes: majority, Action: chaos.ActionPartition, For: etcdTrial}},
			},
			Redlock:      "majority-partition",
			ExpectFenced: chaos.Safe,
		},
		{Scenario: chaos.Scenario{Name: "asymmetric-partition"}, Redlock: "asymmetric-partition", NotApplicable: "not applicable as such: an etcd client talks to one member, so one client losing a majority of the nodes is holder-partitioned below"},
		{
			Scenario: chaos.Scenario{
				Name: "holder-partitioned", Summary: "right after the holder acquired, its member is cut off from its peers; the holder writes every 50 ms while it believes it holds the lock",
				Expect: SometimesUnsafe, Why: "the majority lets the holder's lease expire and grants the rival; the holder learns only when its keep-alive deadline passes (checked once a second), so it often writes after the rival has the lock; whether it does depends on where that check falls. Only the fenced resource rejects those writes",
				Workload: holderAndRival, Duration: scriptedFor + etcdTTL, Availability: chaos.Available,
				Faults: []chaos.Fault{{On: afterA, Nodes: holder, Action: ActionIsolate}},
			},
			ExpectFenced: chaos.Safe,
		},
		{Scenario: chaos.Scenario{Name: "late-extension"}, Redlock: "late-extension", NotApplicable: "not applicable: it tests the owner check of Redlock's extend script; an etcd holder never extends its lock itself, its Session keeps the lease alive"},
		{Scenario: chaos.Scenario{Name: "clock-back-amnesia"}, Redlock: "clock-back-amnesia", NotApplicable: clockNA},
		{Scenario: chaos.Scenario{Name: "election-turns"}, Redlock: "election-turns", NotApplicable: "not applicable here: it is the Redlock leader election's scenario; etcd's concurrency.Election was not compared"},
		{Scenario: chaos.Scenario{Name: "leader-isolated"}, Redlock: "leader-isolated", NotApplicable: "not applicable here: it is the Redlock leader election's scenario; etcd's concurrency.Election was not compared"},
		{Scenario: chaos.Scenario{Name: "exec-asymmetric-partition"}, Redlock: "exec-asymmetric-partition", NotApplicable: "not applicable: it tests how redlock exec stops its job when the lock is lost, and etcd has no redlock exec; the lock itself is covered by holder-partitioned"},
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
	// Sums over the trials, as in chaos.Report: successful and failed
	// acquisitions, mutual-exclusion violations, and of these the ones
	// where both holders believed they held the lock (not only a write
	// after the belief ended).
	Acquisitions, Failed, Violations, BelievedViolations int
	// Sums over the trials: stale writes accepted by the plain and the
	// fenced resource, writes the fenced resource rejected, and holds whose
	// token was not above the previous holder's.
	StalePlain, StaleFenced, RejectedFenced, TokenOrder int
	P50, P99                                            time.Duration   // successful acquisitions' latency, all trials
	Reports                                             []chaos.Report  // per trial
	Histories                                           []chaos.History // per trial, for timelines (chaos.WriteSVG)
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

// Run runs s for trials trials, each on a fresh 3-member cluster, with the
// chaos harness's runner (chaos.RunTarget). Observed is chaos's verdict,
// except that an expected-unsafe scenario is reported unsafe only if every
// trial that counts showed it; ObservedFenced is Unsafe when the fenced
// resource accepted a stale write. progress, if not nil, gets a line per
// trial. It returns an error only when the harness itself fails (a cluster
// does not start), or ErrInvalidArgument for trials < 1.
func Run(ctx context.Context, s Scenario, trials int, seed uint64, progress func(string)) (Result, error) {
	res := Result{Scenario: s.Name, Trials: trials, Seed: seed, Expect: s.Expect, ExpectFenced: s.ExpectFenced}
	if s.NotApplicable != "" {
		res.Skipped = s.NotApplicable
		return res, nil
	}
	if trials < 1 {
		return res, fmt.Errorf("%w: %d trials", ErrInvalidArgument, trials)
	}
	cs := s.Scenario
	cs.FencingBreaks = true // the fenced resource is judged apart
	r, err := chaos.RunTarget(ctx, func(ctx context.Context, w chaos.Workload) (chaos.Target, error) { return newEnv(ctx, w) },
		cs, trials, seed, progress)
	if err != nil {
		return res, fmt.Errorf("etcdcompare: %s: %w", s.Name, err)
	}
	res.Trials, res.Notes, res.Skipped = r.Trials, r.Notes, r.Skipped
	res.Observed, res.UnsafeTrials = r.Observed, r.UnsafeTrials
	if safe := r.Exercised() - r.NotSafe(); r.Observed == chaos.Unsafe && s.Expect == chaos.Unsafe && safe > 0 {
		res.Observed = chaos.Safe
		res.Notes = append(res.Notes, fmt.Sprintf("unsafe in %d of %d trials only", r.UnsafeTrials, r.Exercised()))
	}
	res.ObservedFenced = chaos.Safe
	if r.StaleFenced > 0 {
		res.ObservedFenced = chaos.Unsafe
	}
	res.Acquisitions, res.Failed, res.Violations = r.Acquisitions, r.Failed, r.Violations
	res.StalePlain, res.StaleFenced, res.TokenOrder = r.StalePlain, r.StaleFenced, r.TokenOrder
	for _, rep := range r.Reports {
		res.BelievedViolations += rep.BelievedViolations
		res.RejectedFenced += rep.RejectedWritesFenced
	}
	res.P50, res.P99, res.Reports, res.Histories = r.P50, r.P99, r.Reports, r.Histories
	return res, nil
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
func newEnv(ctx context.Context, w chaos.Workload) (*env, error) {
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

// close ends the clients first, so that calls still waiting return
// (concurrency.Mutex.Lock, when its context ends, deletes its key under the
// client's own context: with the member unreachable that blocks), then the
// sessions (their leases expire with the cluster), the proxies and the
// cluster.
func (e *env) close() {
	e.closeClients()
	for _, p := range e.proxies {
		p.Heal()
	}
	var wg sync.WaitGroup
	for _, l := range e.lockers {
		wg.Go(func() { _ = l.Close() })
	}
	wg.Wait()
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

// Nodes implements chaos.Target: the cluster's members.
func (e *env) Nodes() int { return e.cluster.Size() }

// Locker implements chaos.Target: client i's locker, whose acquisitions
// name the member client i talks to as the one that granted them.
func (e *env) Locker(i int) chaos.Locker { return memberLocker{l: e.lockers[i], member: e.member[i]} }

// PauseClient implements chaos.Target: a paused client's traffic is held.
func (e *env) PauseClient(i int, on bool) { e.proxies[i].Hold(on) }

// Close implements chaos.Target.
func (e *env) Close() error {
	e.close()
	return nil
}

// Fault implements chaos.Target with the actions ActionIsolate describes.
// Faults on members are best effort, as a real fault is: a member already
// stopped is not an error.
func (e *env) Fault(_ context.Context, f chaos.Fault, m int) (string, error) {
	switch f.Action {
	case chaos.ActionKill:
		_ = e.cluster.Kill(m)
		for _, p := range e.proxiesOf(m) {
			_ = p.Down()
		}
		return "killed", nil
	case ActionIsolate:
		_ = e.cluster.Isolate(m)
		return "cut from peers", nil
	case chaos.ActionPartition:
		_ = e.cluster.Isolate(m)
		for _, p := range e.proxiesOf(m) {
			if f.For > 0 {
				p.Hold(true)
			} else {
				p.DropRequests(true)
				p.DropReplies(true)
			}
		}
		return "partitioned", nil
	case chaos.ActionDropReplies:
		for _, p := range e.proxiesOf(m) {
			p.DropReplies(true)
		}
		return "replies lost", nil
	case chaos.ActionDelayReplies:
		for _, p := range e.proxiesOf(m) {
			p.DelayReplies(f.Amount)
		}
		return "replies +" + f.Amount.String(), nil
	case chaos.ActionPause:
		_ = e.cluster.Isolate(m)
		for _, p := range e.proxiesOf(m) {
			p.Hold(true)
		}
		return "frozen", nil
	}
	return "", fmt.Errorf("%w: %s on an etcd member", chaos.ErrUnsupported, f.Action)
}

// Undo implements chaos.Target: a pause or a healing partition ends, the
// member rejoins and its clients' held traffic is delivered.
func (e *env) Undo(_ context.Context, f chaos.Fault, m int) error {
	_ = e.cluster.Rejoin(m)
	for _, p := range e.proxiesOf(m) {
		p.Hold(false)
	}
	return nil
}

// memberLocker is a client's EtcdLocker, with the member it talks to.
type memberLocker struct {
	l      *EtcdLocker
	member int
}

func (l memberLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (chaos.Held, error) {
	h, err := l.l.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	return memberHeld{Held: h, member: l.member}, nil
}

// memberHeld is a held etcd lock that names the member it went through.
type memberHeld struct {
	chaos.Held
	member int
}

// Granted names the member the holder talks to (chaos.PickGranted).
func (h memberHeld) Granted() []int { return []int{h.member} }
