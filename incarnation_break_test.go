package redlock_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// restartFromSnapshot restarts node n from a snapshot taken before the
// given lock names were first used there: the node keeps its marker and
// every other key, loses the names' keys (the lock key and its siblings:
// fencing counter, epoch, a read/write lock's readers), and answers with a new run_id and uptime 0, as a
// redis-server restarted from an older RDB (or AOF everysec after a power
// loss) does.
func restartFromSnapshot(t *testing.T, n *testNode, names ...string) {
	t.Helper()
	in := n.info.Load()
	n.Refuse()
	for _, name := range names {
		for _, k := range n.m.Keys() {
			if k == name || strings.HasPrefix(k, "{"+name+"}") {
				n.m.Del(k) // the lock key and its siblings (fencing counter, epoch, readers...)
			}
		}
	}
	require.True(t, n.m.Exists("redlock:marker"), "the snapshot holds the node's marker")
	n.EmulateInfo(in.policy)
	n.Revive(t)
}

// A Client made with New never reads a node's run_id again after its
// check, so a restart that keeps the marker (a restore from an older
// snapshot, on one node: within the guard's limit) leaves the node
// verified, and old by the estimate from the values read at the check plus
// the local time since, while it is really young. Its grant of a name whose
// key and epoch the snapshot lacks must not count at once: the per-key
// rule, which sees the holder's key on another node, decides
// (docs/amnesia.md, Kinds of loss: on New's clients such a restart is seen
// only by the per-key epochs).
func TestIncarnation_NewClientCountsNoFreshGrantOfANodeRestoredFromASnapshot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		c, _ := incCluster(t, 3, "noeviction") // New's Client
		time.Sleep(redlock.DefaultQuarantine)  // every node is old
		requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)

		// A holds the name on nodes 0 and 1 (node 2 is down).
		c.nodes[2].Refuse()
		a := c.tryAcquire(t, ctx, "job", time.Minute)
		synctest.Wait()
		require.True(t, c.nodes[0].Has("job") && c.nodes[1].Has("job"))

		// Node 0 restarts from a snapshot older than A's grant; node 2 is
		// back, never having seen the name.
		restartFromSnapshot(t, c.nodes[0], "job")
		c.nodes[2].Revive(t)
		for _, nd := range c.nodes {
			for nd.rc.Ping(ctx).Err() != nil { // drop the closed connections
			}
		}

		l, err := c.rl.TryAcquire(ctx, "job", time.Minute)
		if err == nil {
			_ = l.Release(ctx)
		}
		require.ErrorIs(t, err, redlock.ErrTaken, "a second holder while A holds, with node 0's and node 2's fresh grants counted at once")
		_ = a.Release(ctx) // node 0 lost A's key
		synctest.Wait()
	})
}

// holdOnTwo makes client rl take name on nodes 0 and 1 (node 2 is down
// meanwhile, then back), and returns the lock.
func holdOnTwo(t *testing.T, c *cluster, rl *redlock.Client, name string) *redlock.Lock {
	t.Helper()
	c.nodes[2].Refuse()
	a, err := rl.TryAcquire(t.Context(), name, time.Minute)
	require.NoError(t, err)
	synctest.Wait()
	require.True(t, c.nodes[0].Has(name) && c.nodes[1].Has(name) && !c.nodes[2].Has(name))
	c.nodes[2].Revive(t)
	return a
}

// requireNoSecondHolder tries name with rl while A holds it: the attempt
// must fail with ErrTaken.
func requireNoSecondHolder(t *testing.T, rl *redlock.Client, name string) {
	t.Helper()
	l, err := rl.TryAcquire(t.Context(), name, time.Minute)
	if err == nil {
		_ = l.Release(t.Context())
	}
	require.ErrorIs(t, err, redlock.ErrTaken, "a second holder while A holds, with node 0's and node 2's fresh grants counted at once")
}

// On the nodes Dial connects to, a restart is seen by the run_id that a
// new connection reads before any command runs on it. When that INFO fails
// (the node slow to answer it, past its 1 s, just after its start), the
// connection still goes into use, and no later connection is needed: the
// restart, which kept the marker (a restore from an older snapshot), goes
// unseen, and the node stays verified and old. Its grant of a name the
// snapshot lacks must not count at once.
func TestIncarnation_DialRestartWhoseRunIDIsUnreadOnReconnectCountsNoFreshGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := oldIncCluster(t, 3, "noeviction")
		requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
		a := holdOnTwo(t, c, c.rl, "job")

		var failed atomic.Bool // the first INFO after the restart fails
		c.nodes[0].FailIf(func(cmd string, _ []string) bool {
			return strings.EqualFold(cmd, "INFO") && failed.CompareAndSwap(false, true)
		})
		restartFromSnapshot(t, c.nodes[0], "job")
		// Other names, until node 0 grants again: the stale connections
		// have failed and a new one is in use.
		for i := 0; ; i++ {
			require.Less(t, i, 20, "node 0 does not grant")
			l, err := c.rl.TryAcquire(t.Context(), fmt.Sprintf("other-%d", i), time.Minute)
			if err != nil {
				synctest.Wait()
				continue
			}
			got := l.Nodes()[0].Outcome
			require.NoError(t, l.Release(t.Context()))
			synctest.Wait()
			if got == redlock.OutcomeGranted || got == redlock.OutcomeQuarantined {
				break
			}
		}
		require.True(t, failed.Load(), "node 0's reconnection read no run_id")

		requireNoSecondHolder(t, c.rl, "job")
		_ = a.Release(t.Context())
		synctest.Wait()
	})
}

// A Client reads a node's run_id on a new connection only once it knows
// the node (verified or quarantined): during its first check a restart
// goes unseen, and the check, which read INFO server before the restart,
// records the node verified with the earlier run_id and its uptime. A
// restart that kept the marker (a restore from an older snapshot) then
// leaves the node verified and old for good (the connection made during
// the check stays in use): its grant of a name the snapshot lacks must not
// count at once.
func TestIncarnation_DialRestartDuringTheFirstCheckCountsNoFreshGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := incCluster(t, 3, "noeviction") // X, made with New, records every node
		time.Sleep(redlock.DefaultQuarantine)  // every node is old
		a := holdOnTwo(t, c, c.rl, "job")
		before := redlock.Incarnations(c.rl)[0].RunID

		// B's first check of node 0 reads INFO server; as it asks INFO
		// memory, node 0 restarts from a snapshot older than A's grant
		// (the connection closes; B's next one waits for the node to be
		// back, as a TCP connect to a restarting server would).
		var restarted atomic.Bool
		c.nodes[0].FailIf(func(cmd string, args []string) bool {
			if strings.EqualFold(cmd, "INFO") && len(args) == 1 && strings.EqualFold(args[0], "memory") && restarted.CompareAndSwap(false, true) {
				go restartFromSnapshot(t, c.nodes[0], "job")
				time.Sleep(10 * time.Millisecond) // the restart closes this connection first
				return true
			}
			return false
		})
		urls := make([]string, len(c.nodes))
		for i, nd := range c.nodes {
			urls[i] = "redis://" + nd.addr
		}
		rb, err := redlock.DialWith(urls, func(i int, o *redis.Options) {
			o.PoolSize = 1
			o.Dialer = func(context.Context, string, string) (net.Conn, error) {
				for c.nodes[i].refused.Load() {
					time.Sleep(time.Millisecond)
				}
				return c.nodes[i].dial()
			}
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, rb.Close()) })
		l, err := rb.TryAcquire(t.Context(), "warm-up-b", 10*time.Second)
		if err == nil {
			_ = l.Release(t.Context())
		}
		time.Sleep(time.Second) // the check and the restart end
		synctest.Wait()
		require.True(t, restarted.Load())
		// Without the run_id read during the check, B holds node 0 verified
		// with the run_id read before the restart, and old.
		t.Logf("node 0 as B knows it (run_id before the restart %s): %+v", before, redlock.Incarnations(rb)[0])

		requireNoSecondHolder(t, rb, "job")
		_ = a.Release(t.Context())
		synctest.Wait()
	})
}

// The multi-key and read/write locks judge a grant by the same per-node
// rule (Client.nodeVote): on New's nodes a verified node restored from an
// older snapshot (marker kept, run_id unread) lets no second holder in
// with its fresh grants either.
func TestIncarnation_NewClientCountsNoFreshMultiOrRWGrantOfANodeRestoredFromASnapshot(t *testing.T) {
	type kind struct {
		names  []string
		first  func(t *testing.T, rl *redlock.Client) func()
		second func(t *testing.T, rl *redlock.Client) error
	}
	rwLock := func(t *testing.T, rl *redlock.Client, read bool) (func(), error) {
		m, err := rl.RWMutex("doc")
		require.NoError(t, err)
		lock := m.TryLock
		if read {
			lock = m.TryRLock
		}
		l, err := lock(t.Context(), time.Minute)
		if err != nil {
			return nil, err
		}
		return func() { _ = l.Release(t.Context()) }, nil
	}
	kinds := map[string]kind{
		"multi-key lock, then AcquireMulti": {[]string{"a", "b"},
			func(t *testing.T, rl *redlock.Client) func() {
				m, err := rl.TryAcquireMulti(t.Context(), []string{"a", "b"}, time.Minute)
				require.NoError(t, err)
				return func() { _ = m.Release(t.Context()) }
			},
			func(t *testing.T, rl *redlock.Client) error {
				m, err := rl.TryAcquireMulti(t.Context(), []string{"b", "a"}, time.Minute)
				if err == nil {
					_ = m.Release(t.Context())
				}
				return err
			}},
		"writer, then Lock": {[]string{"doc"},
			func(t *testing.T, rl *redlock.Client) func() {
				release, err := rwLock(t, rl, false)
				require.NoError(t, err)
				return release
			},
			func(t *testing.T, rl *redlock.Client) error {
				release, err := rwLock(t, rl, false)
				if err == nil {
					release()
				}
				return err
			}},
		"writer, then RLock": {[]string{"doc"},
			func(t *testing.T, rl *redlock.Client) func() {
				release, err := rwLock(t, rl, false)
				require.NoError(t, err)
				return release
			},
			func(t *testing.T, rl *redlock.Client) error {
				release, err := rwLock(t, rl, true)
				if err == nil {
					release()
				}
				return err
			}},
	}
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, _ := incCluster(t, 3, "noeviction") // New's Client
				time.Sleep(redlock.DefaultQuarantine)  // every node is old
				requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
				c.nodes[2].Refuse()
				release := k.first(t, c.rl)
				synctest.Wait()
				restartFromSnapshot(t, c.nodes[0], k.names...)
				c.nodes[2].Revive(t)
				for _, nd := range c.nodes {
					nd.dropStaleConns(t)
				}
				err := k.second(t, c.rl)
				require.ErrorIs(t, err, redlock.ErrNotAcquired, "a second holder beside A, with node 0's and node 2's fresh grants")
				release()
				synctest.Wait()
			})
		})
	}
}

// A node quarantined as a whole (flushed, or restarted empty, while young)
// may have lost its data, so its grant is no testimony of a name's history
// either way, as a node that did not answer: a fresh name's first use by
// the per-key rule (young verified nodes, or New's) goes on with the
// others' "new" answers, a majority. Counted as history, it locked every
// fresh name out for the node's whole quarantine, though nothing anywhere
// had ever held it.
func TestIncarnation_QuarantinedNodeLocksNoFreshNameOut(t *testing.T) {
	for _, dial := range []bool{true, false} {
		t.Run(map[bool]string{true: "Dial, young nodes", false: "New, old nodes"}[dial], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c, _ := incClusterBy(t, dial, 3, "noeviction")
				if !dial {
					time.Sleep(redlock.DefaultQuarantine)
				}
				c.nodes[0].m.FlushAll()
				l, err := c.rl.TryAcquire(t.Context(), "flush-seen", time.Minute) // node 0's grant shows the flush
				if err == nil {
					_ = l.Release(t.Context())
				}
				synctest.Wait()
				requireStatus(t, c, redlock.IncQuarantined, redlock.IncVerified, redlock.IncVerified)

				for _, multi := range []bool{false, true} {
					var err error
					if multi {
						var m *redlock.MultiLock
						if m, err = c.rl.TryAcquireMulti(t.Context(), []string{"fresh-a", "fresh-b"}, time.Minute); err == nil {
							_ = m.Release(t.Context())
						}
					} else {
						var l *redlock.Lock
						if l, err = c.rl.TryAcquire(t.Context(), "fresh", time.Minute); err == nil {
							_ = l.Release(t.Context())
						}
					}
					require.NoError(t, err, "multi %v", multi)
					synctest.Wait()
				}
				rw, err := c.rl.RWMutex("fresh-doc")
				require.NoError(t, err)
				w, err := rw.TryLock(t.Context(), time.Minute)
				require.NoError(t, err, "read/write lock")
				_ = w.Release(t.Context())
				synctest.Wait()
			})
		})
	}
}
