package redlock_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// syncBuf is a log sink safe for concurrent writes.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

// incCluster is a cluster of n nodes that answer INFO server and memory
// (EmulateInfo with policy), whose Client has read every node's
// incarnation: it made one acquisition, and the checks it started ended.
// The nodes are young (just started): a fresh grant of theirs counts at
// once only once they are old, and only on the nodes whose restarts the
// Client sees (oldIncCluster).
func incCluster(t *testing.T, n int, policy string, opts ...redlock.Option) (*cluster, *syncBuf) {
	t.Helper()
	return incClusterBy(t, false, n, policy, opts...)
}

// incClusterBy is incCluster with a Client made with Dial when dial (it
// sees the nodes' restarts on reconnecting), else with New over the
// nodes' clients.
func incClusterBy(t *testing.T, dial bool, n int, policy string, opts ...redlock.Option) (*cluster, *syncBuf) {
	t.Helper()
	logs := &syncBuf{}
	opts = append([]redlock.Option{redlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil)))}, opts...)
	c := newCluster(t, n, opts...)
	if dial {
		c.rl = dialTestNodes(t, c.nodes, opts...)
	}
	for _, nd := range c.nodes {
		if policy != "" {
			nd.EmulateInfo(policy)
		}
	}
	lock := c.acquire(t, t.Context(), "warm-up", 10*time.Second)
	require.NoError(t, lock.Release(t.Context()))
	synctest.Wait()
	return c, logs
}

// oldIncCluster is incCluster, with a Client made with Dial, once its
// nodes have been up and marked for the longest TTL (DefaultQuarantine): a
// verified node's fresh grant counts at once.
func oldIncCluster(t *testing.T, n int, policy string, opts ...redlock.Option) (*cluster, *syncBuf) {
	t.Helper()
	c, logs := incClusterBy(t, true, n, policy, opts...)
	time.Sleep(redlock.DefaultQuarantine)
	return c, logs
}

// dialTestNodes is a Client made with Dial over the test nodes (their
// in-memory dialer), closed before them.
func dialTestNodes(t *testing.T, nodes []*testNode, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	urls := make([]string, len(nodes))
	for i, nd := range nodes {
		urls[i] = "redis://" + nd.addr
	}
	rl, err := redlock.DialWith(urls, func(i int, o *redis.Options) {
		o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nodes[i].dial() }
	}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	return rl
}

// requireStatus checks every node's incarnation status, in node order.
func requireStatus(t *testing.T, c *cluster, want ...any) {
	t.Helper()
	got := redlock.Incarnations(c.rl)
	require.Len(t, got, len(want))
	for i, w := range want {
		require.Equal(t, w, any(got[i].Status), "node %d: %+v", i, got[i])
	}
}

// A fresh name's grants from nodes whose incarnation is verified count at
// once: the acquisition does not wait for a slow node, where the per-key
// rule (a node that answers no INFO) waits for its answer.
func TestIncarnation_FreshNameDoesNotWaitForSlowNode(t *testing.T) {
	for _, verified := range []bool{true, false} {
		t.Run(map[bool]string{true: "verified", false: "unreadable"}[verified], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				policy := "noeviction"
				if !verified {
					policy = ""
				}
				c, _ := oldIncCluster(t, 3, policy)
				if verified {
					requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
				} else {
					requireStatus(t, c, redlock.IncUnknown, redlock.IncUnknown, redlock.IncUnknown)
				}
				c.nodes[2].SlowAcquire(500 * time.Millisecond)
				start := time.Now()
				lock := c.acquire(t, t.Context(), "fresh-name", 10*time.Second)
				took := time.Since(start)
				// Fake time: only the slow node's delay (or its per-node
				// timeout, whichever is first) takes any.
				if verified {
					require.Less(t, took, 50*time.Millisecond, "a fresh name waited for the slow node")
				} else {
					require.GreaterOrEqual(t, took, 50*time.Millisecond, "the per-key rule waits for every node")
				}
				require.NoError(t, lock.Release(t.Context()))
				synctest.Wait()
			})
		})
	}
}

// A flush of a verified node is seen at its next grant of a fresh name (the
// marker came back different): the node is quarantined, an acquisition
// that needed its vote fails with ErrQuarantined naming it and the time
// left, and once its marker is as old as the longest TTL (the quarantine,
// WithQuarantine) its votes count again. One log line each way.
func TestIncarnation_FlushQuarantinesUntilTheLongestTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = 2 * time.Minute // another process's longer TTL, stated here
		// Made with Dial: once old, nodes 1 and 2's fresh grants count at
		// once beside the quarantined node 0 (on New's nodes the per-key
		// rule decides, and node 0's vote, quarantined, is no answer of "new").
		c, logs := incClusterBy(t, true, 3, "noeviction", redlock.WithQuarantine(bound))
		// Older than the bound before the flush: only the flush counts.
		time.Sleep(bound)
		c.nodes[0].m.FlushAll()
		lock := c.acquire(t, t.Context(), "after-flush", 10*time.Second) // nodes 1 and 2 grant
		require.NoError(t, lock.Release(t.Context()))
		synctest.Wait()
		requireStatus(t, c, redlock.IncQuarantined, redlock.IncVerified, redlock.IncVerified)
		require.Equal(t, 1, logs.count("node quarantined"), logs.b.String())

		c.nodes[1].Refuse()
		_, err := c.rl.Acquire(t.Context(), "needs-node-0", 10*time.Second, redlock.WithRetry(redlock.NoRetry()))
		require.ErrorIs(t, err, redlock.ErrQuarantined)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		qe := quorumError(t, err)
		require.Equal(t, redlock.OutcomeQuarantined, qe.Nodes[0].Outcome)
		require.Greater(t, qe.Nodes[0].QuarantineLeft, bound-time.Minute)
		require.LessOrEqual(t, qe.Nodes[0].QuarantineLeft, bound)
		synctest.Wait()

		// A minute in: still quarantined (the default quarantine, one
		// minute, would have let it vote: the stated bound holds it).
		time.Sleep(time.Minute)
		_, err = c.rl.Acquire(t.Context(), "needs-node-0", 10*time.Second, redlock.WithRetry(redlock.NoRetry()))
		require.ErrorIs(t, err, redlock.ErrQuarantined)
		synctest.Wait()

		time.Sleep(bound - time.Minute)
		// The first attempt after the quarantine checks the node again. Its
		// new incarnation can be recorded only on node 2 (of the two other
		// nodes, a majority is both): until node 1 is back the per-key
		// rule decides for it.
		_, _ = c.rl.Acquire(t.Context(), "needs-node-0", 10*time.Second, redlock.WithRetry(redlock.NoRetry()))
		synctest.Wait()
		requireStatus(t, c, redlock.IncUnknown, redlock.IncVerified, redlock.IncVerified)
		require.Equal(t, 1, logs.count("quarantine ended"), logs.b.String())

		c.nodes[1].Revive(t)
		time.Sleep(time.Second)
		lock = c.acquire(t, t.Context(), "needs-node-0-again", 10*time.Second)
		require.NoError(t, lock.Release(t.Context()))
		synctest.Wait()
		requireStatus(t, c, redlock.IncVerified, redlock.IncVerified, redlock.IncVerified)
		require.Equal(t, 1, logs.count("node quarantined"), logs.b.String())
		require.Equal(t, 1, logs.count("quarantine ended"), logs.b.String())
	})
}

// A node that may evict keys with a TTL is left to the per-key rule, with
// one warning.
func TestIncarnation_EvictingNodeWarnsOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, logs := incCluster(t, 3, "noeviction")
		c.nodes[1].EmulateInfo("allkeys-lru")
		rl, err := redlock.New(c.clients(), redlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		require.NoError(t, err)
		defer rl.Close()
		for range 3 {
			lock, err := rl.Acquire(t.Context(), "k", 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, lock.Release(t.Context()))
			synctest.Wait()
		}
		got := redlock.Incarnations(rl)
		require.Equal(t, redlock.IncVerified, got[0].Status)
		require.Equal(t, redlock.IncUnknown, got[1].Status)
		require.Contains(t, got[1].Reason, "allkeys-lru")
		require.Equal(t, 1, logs.count("may evict lock keys"), logs.b.String())
	})
}

// On the nodes Dial connects to, a restart that kept the data (and so the
// marker) is seen by its new run_id, read on the first new connection
// before any command runs there: the node is quarantined until its uptime
// reaches the longest TTL.
func TestIncarnation_DialSeesRestartByRunID(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logs := &syncBuf{}
		nodes := make([]*testNode, 3)
		for i := range nodes {
			nodes[i] = newTestNode(t, i)
			nodes[i].EmulateInfo("noeviction")
		}
		time.Sleep(2 * time.Minute) // every node is old
		rl := dialTestNodes(t, nodes, redlock.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
		lock, err := rl.Acquire(t.Context(), "warm-up", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, lock.Release(t.Context()))
		synctest.Wait()
		for i, n := range redlock.Incarnations(rl) {
			require.Equal(t, redlock.IncVerified, n.Status, "node %d", i)
		}

		// Node 0 restarts with its data: a new run_id, the same marker.
		nodes[0].Refuse()
		nodes[0].EmulateInfo("noeviction")
		nodes[0].Revive(t)
		// The pool may still hold several connections from before the
		// restart: each fails once; the first new one reads the new run_id.
		for range 10 {
			lock, err = rl.Acquire(t.Context(), "after-restart", 10*time.Second)
			require.NoError(t, err) // nodes 1 and 2
			require.NoError(t, lock.Release(t.Context()))
			synctest.Wait()
			if redlock.Incarnations(rl)[0].Status == redlock.IncQuarantined {
				break
			}
		}
		got := redlock.Incarnations(rl)
		require.Equal(t, redlock.IncQuarantined, got[0].Status, "%+v", got[0])
		require.Equal(t, 1, logs.count("node restarted (new run_id)"), logs.b.String())
		require.Equal(t, 1, logs.count("node quarantined"), logs.b.String())
	})
}

// A node whose earlier incarnation was never recorded (its grants counted
// by the per-key rule: its INFO failed, or too few records could be
// written) and that restarted empty is verified by the first check that
// finds no record of it, while it is young: a lock its earlier incarnation
// granted may still be live. Its grant of the lock's name must not count
// at once, or a second owner takes the lock with it and a node that never
// saw the first. Found by the chaos catalogue (the amnesia-guarded election,
// about 1 trial in 40 under load): the restart came before the holder's
// client had recorded the node.
func TestIncarnation_YoungUnrecordedNodeGrantsNoFreshNameAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		c := newCluster(t, 3)
		for _, nd := range c.nodes {
			nd.EmulateInfo("noeviction")
		}
		// A: node 0 hides its incarnation, node 2 is down; the name's first
		// use is decided by the per-key rule on nodes 0 and 1.
		c.nodes[0].FailIf(func(cmd string, _ []string) bool { return strings.EqualFold(cmd, "INFO") })
		c.nodes[2].Refuse()
		a := c.tryAcquire(t, ctx, "job", time.Minute)
		synctest.Wait()
		requireStatus(t, c, redlock.IncUnknown, redlock.IncUnknown, redlock.IncUnknown)

		// Node 0 restarts without its data and answers INFO again; node 2
		// is back.
		c.nodes[0].FailIf(nil)
		c.nodes[0].RestartEmpty(t)
		c.nodes[2].Revive(t)
		for _, nd := range c.nodes {
			nd.dropStaleConns(t)
		}

		// B, another process (made with Dial: an old verified node's fresh
		// grants count at once only on the nodes whose restarts it sees):
		// its checks record node 0's new incarnation,
		// the first they find. Its first attempt is judged by the per-key
		// rule (the checks run in the background); the next ones with
		// every node's incarnation read.
		rb := dialTestNodes(t, c.nodes)
		_, err := rb.TryAcquire(ctx, "job", time.Minute)
		require.ErrorIs(t, err, redlock.ErrTaken)
		synctest.Wait()
		require.Equal(t, redlock.IncVerified, redlock.Incarnations(rb)[0].Status, "node 0's new incarnation is recorded: %+v", redlock.Incarnations(rb))
		for range 3 {
			_, err = rb.TryAcquire(ctx, "job", time.Minute)
			require.ErrorIs(t, err, redlock.ErrTaken, "B took the lock A holds, with node 0's grant")
			synctest.Wait()
		}

		// Once node 0 has been up for the longest TTL, A's lock from its
		// earlier incarnation has expired, and its fresh grants count at
		// once.
		require.ErrorIs(t, a.Release(ctx), redlock.ErrNotHeld, "node 0 lost A's key")
		time.Sleep(time.Minute)
		c.nodes[1].SlowAcquire(500 * time.Millisecond)
		start := time.Now()
		l, err := rb.TryAcquire(ctx, "fresh-name", time.Minute)
		require.NoError(t, err)
		require.Less(t, time.Since(start), 50*time.Millisecond, "an old verified node's fresh grant waited for the slow node")
		require.NoError(t, l.Release(ctx))
		synctest.Wait()
	})
}
