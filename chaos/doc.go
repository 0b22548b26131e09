// Package chaos is the fault-injection harness behind `redlock chaos`: it
// runs Redlock clients against N Redis nodes while it kills, pauses,
// partitions and restarts the nodes and moves their clocks, and judges the
// recorded history. It is to a Redlock deployment what net/http/httptest is
// to a handler: NewCluster, then Client or Run, then Close.
//
//	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Nodes: 5})
//	if err != nil { ... }
//	defer cluster.Close()
//	s, _ := chaos.Find("client-pause")
//	res, err := chaos.Run(ctx, cluster, s, 2, seed, nil)
//	// res.Observed == res.Expect: the failure mode behaved as documented.
//
// # Scenarios
//
// A Scenario is a failure mode as data: a Workload (how many clients, the
// TTL, how long each holds the lock, and how it holds it: Acquire, Extend,
// KeepAlive, Do or `redlock exec`), a schedule of Faults, and the Verdict a
// correct lock must get, with the reason (Why). Catalogue lists the built-in
// scenarios (Find one by name); Scaled stretches one's durations. Run runs a
// scenario for some trials, each seeded (the same seed replays the same fault
// schedule) on a healed and emptied cluster, and returns a Result.
// ExampleScenario writes one by hand.
//
// # Backends
//
// A Cluster is N nodes of one Backend: InProcess (miniredis servers in this
// process, each with its own clock; no set-up, the default) or RedisServer
// (real redis-server processes on free loopback ports, each verified by pid,
// stopped by Close). Each node sits behind its own fault-injecting TCP Proxy
// on 127.0.0.1; Cluster.Client returns a redlock.Client through the proxies.
// A redis-server node's clock is real where a C compiler is found: a clock
// shim preloaded into the server moves its own wall clock (ClockMode;
// Cluster.Clocks says which was used). In-process nodes answer INFO server
// and INFO memory as redis-server does (a run_id that every start changes,
// uptime_in_seconds on the node's clock, maxmemory_policy), so code that
// reads them runs the same on both backends.
//
// # Faults
//
// Faults are verbs on a Node: Kill, Restart (data kept), RestartAmnesia
// (data lost), Pause, JumpClock, SetClockRate, Partition, DelayRequests,
// DelayReplies, DropRequests, DropReplies, HealNetwork, and the other ways a
// node loses data: Flush (FLUSHALL), EvictKey, Replace (a fresh server on
// the address), RestartFromSnapshot (back to a Snapshot taken earlier, the
// writes since lost); Cluster.HealAll undoes them all. A Fault in a scenario names one of them (an Action:
// ActionKill, ActionRestartAmnesia, ActionPause, ...), the nodes it hits (NodeSet: fixed, at random from the trial's seed, the overlap
// of two quorums, the nodes that granted a given acquisition), when (At, or
// On an acquisition, At after it), for how long (For), and whether its
// nodes get it one after another (Stagger). A network fault may be limited
// to some clients (an asymmetric partition). A fault a backend cannot produce
// (ErrUnsupported) makes the Result Skipped, never a pass. The proxy delays
// delivery rather than reads, tells a lost request from a lost reply, and
// acts on connections already open.
//
// # The oracle
//
// Every hold writes throughout to two shared resources: a plain one that
// accepts everything, and a fenced one: by default fencing.Register itself, the
// fenced register this repository ships, or real storage (ClusterOptions.Fenced: a
// FencedStore such as RedisStore, or PostgreSQL from the pgfence module). The oracle sees every client's believed-held
// interval [acquired, validity deadline], each write and each fault on one
// process clock, and reports: mutual-exclusion violations (two clients' holds
// overlapping, counting a paused holder's late write as still holding), stale
// writes accepted by each resource, and fencing tokens out of holder order.
// porcupine's linearizability checker judges the fenced writes a second time
// with code that shares nothing with the oracle; a disagreement is a harness
// error. A scenario's own checks (availability, extensions, released keys,
// validity counted from before the first request) add to the verdict.
//
// # Reading the output
//
// A Result carries the expected and the Observed Verdict: Safe (no overlap
// and no stale write, even on the plain resource), Unsafe (mutual exclusion
// was broken: a limit of Redlock the scenario documents, such as a client
// pause past the TTL or a node that forgot its keys) or Broken (a promise of
// the library failed: the fenced resource took a stale write, tokens went
// backwards, a lock was handed out with no validity left; Notes say which).
// Match and Mismatch compare the two; a scenario expected unsafe gets more
// trials, up to UnsafeTrialLimit, to show it. UnsafeTrials and BrokenTrials
// say in how many trials it failed, and RateUpper and RateLower bound the
// rate of such trials at 95 % confidence (RateBounds): 0 in 300 trials puts
// it below 1 %. A trial whose only failure is a liveness check (no lock
// taken, on a machine too slow for the scenario's timeouts) is judged on
// its safety alone (Result.LivenessMisses). Reports holds the oracle's
// counts per trial, Histories the recorded timelines, which WriteSVG draws:
// a lane per client with its holds and writes, a lane per node with its
// faults, violations in red.
//
// # Other lock services
//
// RunTarget runs a scenario on a lock service other than Redlock: each trial
// starts a Target, whose nodes take the faults and whose Lockers the
// workload's clients acquire through (a Held carries the fencing token and
// says when the holder learns the lock may be lost); the verdict is Run's.
// The etcd comparison (the etcdcompare module) runs the catalogue on etcd
// this way.
//
// # Mutants
//
// Mutants lists deliberately broken builds of the lock (a quorum of one, a
// release without the owner check, ...). RunMutant runs a scenario against
// one: the harness is only trusted because it catches every one of them.
//
// # Time
//
// Scenarios run in real time with short TTLs (hundreds of milliseconds);
// Scenario.Scaled stretches every duration for slow or loaded machines.
package chaos
