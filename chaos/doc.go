// Package chaos is the fault-injection harness behind `redlock chaos`: it
// runs Redlock clients against N Redis nodes while it kills, pauses,
// partitions and restarts the nodes and moves their clocks, and judges the
// recorded history.
//
// A Cluster is N nodes (in-process miniredis or real redis-server
// processes), each behind its own fault-injecting TCP Proxy; faults are verbs
// on a Node (Kill, Restart, RestartAmnesia, Pause, Partition, JumpClock,
// SetClockRate, ...). A Scenario is a failure mode as data: a Workload (what
// the clients do: Acquire, Extend, KeepAlive, Do, with writes to a plain and
// a fenced resource throughout each hold), a fault schedule, and the verdict
// a correct lock must get. Run runs it; the Oracle judges each trial (overlaps
// of holds, stale writes, token order) and porcupine checks the fenced
// register again. Catalogue lists the built-in scenarios.
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
