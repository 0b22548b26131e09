// Package etcdcompare runs the chaos catalogue's scenarios against etcd's
// lock (go.etcd.io/etcd/client/v3/concurrency: a Session and a Mutex, with the
// mutex key's create revision as the fencing token) on an embedded 3-member
// etcd cluster, so that they can be put next to Redlock's results
// (cmd/compare, docs/etcd-comparison.md).
//
// It is a module of its own so that the redlock module never depends on etcd.
// It uses the chaos harness's oracle (internal/oracle), its proxy and
// timeline renderer, and fencing.Register as the fenced resource, and keeps a
// small runner of its own: etcd's leases are whole seconds, faults
// act on members and on one client's traffic, and an etcd holder's belief ends
// when its session's Done channel closes, not at a fixed deadline.
//
// The lock is reached through Locker and Held, the shape of a harness seam:
// Acquire(ctx, key, ttl) returns a Held with a fencing token, a Done channel
// that closes when the holder learns the lock may be lost, and Release. A
// Redlock lock fits the same shape (RedlockLocker: Done closes at the lock's
// validity deadline).
package etcdcompare
