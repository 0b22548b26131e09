package redlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The per-node rule (incarnation.go) in the multi-key and read/write locks,
// as in the mutex: an old verified node's grant of a fresh name counts at once,
// and a node that lost its data counts for nothing, whatever its epochs say.

// A fresh name's grants from verified nodes count beside a node whose
// answer looks like history but is none. Multi-key: {a, b} is released,
// and Release returns at nodes 1 and 2 while its delete on node 0 is held
// back (a Release returns at a majority, by design); {c, b} then finds b
// still there on node 0 and c new on nodes 1 and 2. By the per-key rule
// alone c is not new to the cluster (node 0 answered "taken"), so nodes 1
// and 2 were quarantined and the lock refused with no data lost anywhere:
// the shape of TestAcquireMulti_OverlapsExclude's flake, made deterministic.
// Read lock: a first reader's vouching lands on node 0 only (held back on
// nodes 1 and 2), and a second reader
// finds the name's epoch trusted on node 0 and new elsewhere: by the
// per-key rule nodes 1 and 2 were quarantined and the reader refused (the
// read/write lock's "First use" limit: concurrent first readers).
func TestIncarnation_VerifiedNodesGrantFreshMultiAndReadLocks(t *testing.T) {
	t.Run("multi-key lock beside a release held back", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, _ := oldIncCluster(t, 3, "noeviction")
			requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
			ctx := t.Context()
			for _, nd := range c.nodes {
				require.NoError(t, redlock.LoadScripts(ctx, nd.rc)) // the delay below holds the script call itself
			}
			ab, err := c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
			require.NoError(t, err)
			synctest.Wait() // its vouching has landed everywhere
			// Held back within the per-node timeout (100 ms), so it lands.
			c.nodes[0].SlowScripts(50*time.Millisecond, "multi-release")
			require.NoError(t, ab.Release(ctx))
			require.True(t, c.nodes[0].Has("b"), "the delete on node 0 is held back")

			cb, err := c.rl.TryAcquireMulti(ctx, []string{"c", "b"}, 10*time.Second)
			require.NoError(t, err, "nodes 1 and 2 are verified and hold no data lost")
			got := outcomes(cb.Nodes())
			assert.Equal(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomeGranted}, got[1:], "%v", got)
			assert.NotEqual(t, redlock.OutcomeGranted, got[0], "node 0 still holds b for {a, b}")
			require.NoError(t, cb.Release(ctx))
			time.Sleep(50 * time.Millisecond) // node 0's delete of {a, b} lands
			for _, k := range []string{"a", "b", "c"} {
				c.requireGone(t, k)
			}
		})
	})
	t.Run("read lock beside a first reader's vouching half done", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, _ := oldIncCluster(t, 3, "noeviction")
			requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
			ctx := t.Context()
			rw, err := c.rl.RWMutex("doc")
			require.NoError(t, err)
			// Node 0 grants the first reader in time, and its vouching
			// lands there only: it is held back on nodes 1 and 2 (node 2
			// answers last, after its vote may have been decided: then it
			// gets no vouching but its release's).
			c.nodes[1].SlowScripts(time.Second, "rw-fence")
			c.nodes[2].slowScriptsBy(map[string]time.Duration{"rw-acquire": time.Millisecond, "rw-fence": time.Second})
			r1, err := rw.TryRLock(ctx, 10*time.Second)
			require.NoError(t, err, "the name's first use")
			synctest.Wait() // the vouching landed on node 0, and waits on nodes 1 and 2
			states, err := c.rl.Inspect(ctx, "doc")
			require.NoError(t, err)
			require.True(t, states[0].Trusted, "%+v", states[0])
			require.False(t, states[1].Trusted, "%+v", states[1])
			require.False(t, states[2].Trusted, "%+v", states[2])

			r2, err := rw.TryRLock(ctx, 10*time.Second)
			require.NoError(t, err, "nodes 1 and 2 are verified: their new epochs count")
			got := outcomes(r2.Nodes())
			assert.GreaterOrEqual(t, countGranted(r2.Nodes()), 2, "%v", got)
			assert.NotContains(t, got, redlock.OutcomeQuarantined)
			require.NoError(t, r2.Release(ctx))
			require.NoError(t, r1.Release(ctx))
			time.Sleep(time.Second)
			synctest.Wait()
			assert.Zero(t, c.rwKeysLeft("doc"))
		})
	})
}

// dropStaleConns pings the node until it answers: after Refuse or
// RestartEmpty, every connection its client pooled before is closed, and
// each fails one command before the pool lets it go (net.Pipe connections
// get no health check). Then the next call is the node's answer, not a
// stale connection's error.
func (n *testNode) dropStaleConns(t testing.TB) {
	t.Helper()
	for i := 0; n.rc.Ping(t.Context()).Err() != nil; i++ {
		require.Less(t, i, 100, "the node does not answer")
	}
}

// slowScriptsBy delays the calls of each of the library's scripts named
// in delays (keys of redlock.ScriptHashes) by its own delay.
func (n *testNode) slowScriptsBy(delays map[string]time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = func(cmd string, args []string) time.Duration {
		for name, d := range delays {
			if isScript(name, cmd, args) {
				return d
			}
		}
		return 0
	}
}

// countGranted counts the granted outcomes.
func countGranted(rs []redlock.NodeResult) int {
	n := 0
	for _, r := range rs {
		if r.Outcome == redlock.OutcomeGranted {
			n++
		}
	}
	return n
}

// A node that loses its data while a multi-key lock or a writer holds
// does not let a second holder in, though the keys look new on every node
// that answers: A holds on nodes 0 and 1 (node 2 was down when it
// acquired), then node 0 is flushed or restarts empty and node 1 is down.
// Node 0's epochs and node 2's are new, so by the per-key rule the keys
// look new to the cluster and B would win (the limit of
// TestAmnesiaGuard_MajorityEmptiedOrDownLooksBrandNew); the per-node rule
// sees node 0's marker gone and counts none of its votes.
func TestIncarnation_LostNodeAdmitsNoSecondMultiOrRWHolder(t *testing.T) {
	type lockKind struct {
		name   string
		first  func(t *testing.T, c *cluster) interface{ Validity() time.Duration }
		second func(t *testing.T, c *cluster) error
	}
	multi := func(keys ...string) func(t *testing.T, c *cluster) error {
		return func(t *testing.T, c *cluster) error {
			m, err := c.rl.TryAcquireMulti(t.Context(), keys, 10*time.Second)
			if err == nil {
				_ = m.Release(t.Context())
			}
			return err
		}
	}
	rw := func(read bool) func(t *testing.T, c *cluster) error {
		return func(t *testing.T, c *cluster) error {
			m, err := c.rl.RWMutex("doc")
			require.NoError(t, err)
			lock := m.TryLock
			if read {
				lock = m.TryRLock
			}
			l, err := lock(t.Context(), 10*time.Second)
			if err == nil {
				_ = l.Release(t.Context())
			}
			return err
		}
	}
	writer := func(t *testing.T, c *cluster) interface{ Validity() time.Duration } {
		m, err := c.rl.RWMutex("doc")
		require.NoError(t, err)
		w, err := m.TryLock(t.Context(), 20*time.Second)
		require.NoError(t, err)
		return w
	}
	kinds := []lockKind{
		{"multi-key lock, then AcquireMulti", func(t *testing.T, c *cluster) interface{ Validity() time.Duration } {
			m, err := c.rl.TryAcquireMulti(t.Context(), []string{"a", "b"}, 20*time.Second)
			require.NoError(t, err)
			return m
		}, multi("b", "a")},
		{"writer, then Lock", writer, rw(false)},
		{"writer, then RLock", writer, rw(true)},
	}
	losses := map[string]func(t *testing.T, n *testNode){
		"flushed":         func(_ *testing.T, n *testNode) { n.m.FlushAll() },
		"restarted empty": func(t *testing.T, n *testNode) { n.RestartEmpty(t) },
	}
	for _, k := range kinds {
		for lossName, lose := range losses {
			t.Run(k.name+", node "+lossName, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					c, _ := incCluster(t, 3, "noeviction")
					time.Sleep(2 * time.Minute) // every node is old: only the loss counts
					requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
					c.nodes[2].Refuse()
					a := k.first(t, c)
					synctest.Wait()
					c.nodes[2].Revive(t)
					c.nodes[2].dropStaleConns(t)

					lose(t, c.nodes[0])
					c.nodes[0].dropStaleConns(t)
					c.nodes[1].Refuse()
					err := k.second(t, c)
					require.ErrorIs(t, err, redlock.ErrNotAcquired, "a second holder beside A")
					require.ErrorIs(t, err, redlock.ErrQuarantined)
					qe := quorumError(t, err)
					assert.Equal(t, redlock.OutcomeQuarantined, qe.Nodes[0].Outcome, "node 0 lost its data")
					assert.Positive(t, qe.Nodes[0].QuarantineLeft)
					assert.LessOrEqual(t, qe.Granted, 1, "node 2 at most")
					assert.Positive(t, a.Validity(), "A still holds")
					synctest.Wait()
					c.nodes[1].Revive(t)
				})
			})
		}
	}
}

// A node restarted with its data (a new run_id, seen by Dial's clients on
// the first new connection; the same marker, the keys' epochs still
// trusted) is quarantined as a whole for the multi-key and read/write
// locks too: its grant counts for neither, though every epoch it reports
// is trusted. Node 2 answers last, so node 0's answer is in the vote.
func TestIncarnation_RestartedNodeWithItsDataCountsForNoMultiOrRWLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := make([]*testNode, 3)
		for i := range nodes {
			nodes[i] = newTestNode(t, i)
			nodes[i].EmulateInfo("noeviction")
		}
		time.Sleep(2 * time.Minute) // every node is old
		rl := dialTestNodes(t, nodes)
		ctx := t.Context()
		rw, err := rl.RWMutex("doc")
		require.NoError(t, err)
		// Every node is verified, and holds trusted epochs of a, b and doc.
		l, err := rl.TryAcquire(ctx, "warm-up", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx))
		m, err := rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, m.Release(ctx))
		w, err := rw.TryLock(ctx, 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
		for i, n := range redlock.Incarnations(rl) {
			require.Equal(t, redlock.IncVerified, n.Status, "node %d", i)
		}

		nodes[0].Refuse()
		nodes[0].EmulateInfo("noeviction") // a new run_id, uptime 0
		nodes[0].Revive(t)
		// Each connection pooled before the restart fails once; the first
		// new one reads the new run_id.
		for range 10 {
			if redlock.Incarnations(rl)[0].Status == redlock.IncQuarantined {
				break
			}
			_, _ = rl.TryAcquire(ctx, "after-restart", 10*time.Second)
			synctest.Wait()
		}
		require.Equal(t, redlock.IncQuarantined, redlock.Incarnations(rl)[0].Status)

		nodes[2].SlowScripts(time.Millisecond, "multi-acquire", "rw-acquire")
		m, err = rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err, "nodes 1 and 2")
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeQuarantined, redlock.OutcomeGranted, redlock.OutcomeGranted}, outcomes(m.Nodes()))
		require.NoError(t, m.Release(ctx))
		synctest.Wait()
		w, err = rw.TryLock(ctx, 10*time.Second)
		require.NoError(t, err, "nodes 1 and 2")
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeQuarantined, redlock.OutcomeGranted, redlock.OutcomeGranted}, outcomes(w.Nodes()))
		require.NoError(t, w.Release(ctx))
		synctest.Wait()
	})
}

// A Client that takes only multi-key and read/write locks reads the nodes'
// incarnations as one that takes a mutex does: the per-node rule applies
// from its first acquisition's checks on.
func TestIncarnation_MultiAndRWLocksReadTheIncarnations(t *testing.T) {
	for _, kind := range []string{"multi-key", "read", "write"} {
		t.Run(kind, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 3)
				for _, nd := range c.nodes {
					nd.EmulateInfo("noeviction")
				}
				ctx := t.Context()
				rw, err := c.rl.RWMutex("doc")
				require.NoError(t, err)
				var l interface{ Release(context.Context) error }
				switch kind {
				case "multi-key":
					l, err = c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
				case "read":
					l, err = rw.TryRLock(ctx, 10*time.Second)
				default:
					l, err = rw.TryLock(ctx, 10*time.Second)
				}
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
				synctest.Wait()
				requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
			})
		})
	}
}
