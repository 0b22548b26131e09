package redlock_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// lateCluster is 3 test nodes and a Client over them made by New, or by
// Dial over the nodes' own connections (DelayReplies works on both), with
// scripts loaded and each node's connection pool warmed by one lock.
func lateCluster(t *testing.T, dial bool, opts ...redlock.Option) ([]*testNode, *redlock.Client) {
	t.Helper()
	if !dial {
		c := newWarmCluster(t, 3, opts...)
		return c.nodes, c.rl
	}
	nodes := make([]*testNode, 3)
	urls := make([]string, 3)
	for i := range nodes {
		nodes[i] = newTestNode(t, i)
		urls[i] = "redis://" + nodes[i].addr
		require.NoError(t, redlock.LoadScripts(context.Background(), nodes[i].rc))
	}
	rl, err := redlock.DialWith(urls, func(i int, o *redis.Options) {
		o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nodes[i].dial() }
	}, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	l, err := rl.TryAcquire(context.Background(), "warm-up", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	synctest.Wait()
	return nodes, rl
}

// slowCommands makes node n run every command a client sends it (a new
// connection's handshake included, not the commands of its scripts) d late.
func slowCommands(n *testNode, d time.Duration) {
	n.SlowIf(d, func(cmd string, _ []string) bool { return cmd == "EVALSHA" || cmd == "EVAL" || cmd == "HELLO" })
}

// A grant whose reply comes after the vote was decided is deleted when the
// reply arrives. Node 2 runs every command 300 ms after it was sent (a new
// connection's handshake too); the per-node timeout is 100 ms (5 s TTL).
// Lock after lock (each on a key of its own) is won on nodes 0 and 1 and
// released at once, so node 2's SETs run after the Releases, and a delete
// sent on a new connection after the acquire call's 100 ms would wait
// behind a handshake that never ends in time. Once node 2's replies have
// come, it holds none of the keys.
func TestRelease_LateGrantIsDeletedWhenItsReplyArrives(t *testing.T) {
	for _, dial := range []bool{false, true} {
		t.Run(fmt.Sprint("dial=", dial), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				nodes, rl := lateCluster(t, dial)
				slowCommands(nodes[2], 300*time.Millisecond)
				const locks = 40
				for i := range locks {
					l, err := rl.TryAcquire(ctx, fmt.Sprint("k", i), 5*time.Second)
					require.NoError(t, err)
					require.NoError(t, l.Release(ctx))
				}
				time.Sleep(time.Second) // every reply of node 2's, and every delete
				synctest.Wait()
				for i := range locks {
					k := fmt.Sprint("k", i)
					assert.False(t, nodes[2].Has(k), "node 2 still holds %s (ttl %v)", k, nodes[2].m.TTL(k))
				}
			})
		})
	}
}

// An Acquire whose caller gives up while its grants' replies are on their
// way: every node runs the SET at once and answers 300 ms later; the
// caller's context ends at 80 ms (TTL 1 s, per-node timeout 100 ms). Each
// grant is deleted when its reply arrives: at 400 ms no node holds the key,
// and another client takes it at once.
func TestAcquire_CanceledLeavesNoKeyWhenTheGrantsAnswerLate(t *testing.T) {
	for _, dial := range []bool{false, true} {
		t.Run(fmt.Sprint("dial=", dial), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, rl := lateCluster(t, dial)
				for _, nd := range nodes {
					nd.DelayReplies(300 * time.Millisecond)
				}
				start := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 80*time.Millisecond)
				defer cancel()
				_, err := rl.Acquire(ctx, "job", time.Second)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				require.ErrorIs(t, err, context.DeadlineExceeded)
				time.Sleep(time.Until(start.Add(400 * time.Millisecond)))
				synctest.Wait()
				for i, nd := range nodes {
					assert.False(t, nd.Has("job"), "node %d still holds the key (ttl %v)", i, nd.m.TTL("job"))
					nd.DelayReplies(0)
				}
				other := newClientOver(t, nodes)
				l, err := other.TryAcquire(context.Background(), "job", time.Second)
				require.NoError(t, err, "the key is free")
				require.NoError(t, l.Release(context.Background()))
			})
		})
	}
}

// newClientOver is another process's Client (New) over the nodes' clients.
func newClientOver(t *testing.T, nodes []*testNode) *redlock.Client {
	t.Helper()
	clients := make([]redis.UniversalClient, len(nodes))
	for i, nd := range nodes {
		clients[i] = nd.rc
	}
	rl, err := redlock.New(clients)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	return rl
}
