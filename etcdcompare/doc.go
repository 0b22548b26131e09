// Package etcdcompare runs the chaos catalogue's scenarios against etcd's
// lock (go.etcd.io/etcd/client/v3/concurrency: a Session and a Mutex, with the
// mutex key's create revision as the fencing token) on an embedded 3-member
// etcd cluster, so that they can be put next to Redlock's results
// (cmd/compare, docs/etcd-comparison.md).
//
// It is a module of its own so that the redlock module never depends on etcd.
// It runs them with the chaos harness's own scenario vocabulary and runner
// (chaos.Scenario, chaos.Fault, chaos.RunTarget): each trial starts a fresh
// cluster, a chaos.Target whose nodes are the members, faults act on members
// and on one client's traffic (ActionIsolate says how each action maps), and
// each client reaches the lock through a chaos.Locker (EtcdLocker, one
// session per client), whose holder's belief ends when its session's Done
// channel closes, not at a fixed deadline. The fenced resource is
// fencing.Register, as in the chaos harness. A Redlock lock fits the same
// seam (RedlockLocker: Done closes at the lock's validity deadline).
package etcdcompare
