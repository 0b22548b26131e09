package redlock_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// restartFromSnapshot restarts node n from a snapshot taken before the
// given lock names were first used there: the node keeps its marker and
// every other key, loses the names' keys (the lock key, its fencing counter
// and its epoch), and answers with a new run_id and uptime 0, as a
// redis-server restarted from an older RDB (or AOF everysec after a power
// loss) does.
func restartFromSnapshot(t *testing.T, n *testNode, names ...string) {
	t.Helper()
	in := n.info.Load()
	n.Refuse()
	for _, name := range names {
		for _, k := range []string{name, redlock.SiblingKey(name, ":fence"), redlock.SiblingKey(name, ":epoch")} {
			n.m.Del(k)
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
