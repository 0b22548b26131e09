package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

// Simultaneous first uses of one key (several pods starting the same job at
// once, the candidates of a new election). The liveness property: when no
// node is faulty and one client's SET NX won on a majority of the nodes,
// that client acquires the key in its one attempt (TryAcquire), with the
// amnesia guard as without it. The safety property: at most one of them
// holds it. When no client won a majority (the grants split three ways, say),
// every attempt may fail, as with the guard off: that is Redlock's own
// limit, which retries resolve.

// ownerGen is an owner generator whose values start with the client's name,
// so that a node can tell the clients' acquire calls apart.
func ownerGen(name string) redlock.Option {
	var n atomic.Int64
	return redlock.WithOwnerGenerator(func() (string, error) {
		return fmt.Sprintf("%s-%d", name, n.Add(1)), nil
	})
}

// delayAcquireBy makes the node run each acquire script call after the
// delay that by gives for the call's owner value (ARGV[1]); other commands
// run at once.
func (n *testNode) delayAcquireBy(by func(owner string) time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = func(cmd string, args []string) time.Duration {
		if !isScript("acquire", cmd, args) || len(args) < 6 {
			return 0
		}
		return by(args[5]) // sha, numkeys, 3 keys, owner
	}
}

// firstUses starts the clients' TryAcquire of key at once and returns
// their locks (nil for a failed attempt) and errors.
func firstUses(clients []*redlock.Client, key string, ttl time.Duration) ([]*redlock.Lock, []error) {
	ctx := context.Background()
	locks, errs := make([]*redlock.Lock, len(clients)), make([]error, len(clients))
	var wg sync.WaitGroup
	for j, rl := range clients {
		wg.Go(func() { locks[j], errs[j] = rl.TryAcquire(ctx, key, ttl) })
	}
	wg.Wait()
	return locks, errs
}

// Two clients, three nodes, a fresh key: A's SET reaches node 0 first, B's
// reaches nodes 1 and 2 first. B holds a majority of the grants, all of
// them on epochs created just now, and node 0 says "taken" (A's key): B
// acquires the key in its one attempt, A does not.
func TestAmnesiaGuard_SplitFirstUseHasAWinner(t *testing.T) {
	for _, guard := range []bool{true, false} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opt := redlock.WithQuarantine(time.Minute)
				if !guard {
					opt = redlock.WithoutAmnesiaGuard()
				}
				c := newWarmCluster(t, 3, opt, ownerGen("A"))
				b := c.secondClient(t, opt, ownerGen("B"))
				for i, nd := range c.nodes {
					first := "B-"
					if i == 0 {
						first = "A-"
					}
					nd.delayAcquireBy(func(owner string) time.Duration {
						if strings.HasPrefix(owner, first) {
							return 0
						}
						return time.Millisecond
					})
				}
				locks, errs := firstUses([]*redlock.Client{c.rl, b}, "report:today", 10*time.Second)
				require.Error(t, errs[0], "A won node 0 only")
				require.NoError(t, errs[1], "B won nodes 1 and 2")
				require.NoError(t, locks[1].Release(context.Background()))
				synctest.Wait()
				for _, nd := range c.nodes {
					nd.delayAcquireBy(func(string) time.Duration { return 0 })
				}
				if guard {
					requireNoUnvouchedEpoch(t, c, "report:today")
				}
				c.requireGone(t, "report:today")
			})
		})
	}
}

// The property, on generated races: 3 or 5 nodes, 2 to 4 clients making the
// first use of one key at once, each node running the clients' SETs in a
// drawn order. The client first on a majority of the nodes, if there is
// one, acquires the key; nobody else does; afterwards no node keeps a key
// or an unvouched epoch, and the key is acquired at once.
func TestAmnesiaGuard_SimultaneousFirstUsesProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
			k := rapid.IntRange(2, 4).Draw(rt, "clients")
			c := newWarmCluster(rt, n, ownerGen("c0"))
			clients := []*redlock.Client{c.rl}
			for j := 1; j < k; j++ {
				clients = append(clients, c.secondClient(rt, ownerGen(fmt.Sprintf("c%d", j))))
			}
			firsts := make([]int, k) // nodes each client reaches first
			for i, nd := range c.nodes {
				order := rapid.Permutation(seq(k)).Draw(rt, fmt.Sprintf("order%d", i))
				firsts[order[0]]++
				rank := make(map[string]time.Duration, k)
				for r, j := range order {
					rank[fmt.Sprintf("c%d-", j)] = time.Duration(r) * time.Millisecond
				}
				nd.delayAcquireBy(func(owner string) time.Duration {
					return rank[owner[:strings.IndexByte(owner, '-')+1]]
				})
			}
			winner := -1
			for j, f := range firsts {
				if f > n/2 {
					winner = j
				}
			}
			locks, errs := firstUses(clients, "job", 10*time.Second)
			held := 0
			for j := range clients {
				if errs[j] == nil {
					held++
				}
				if winner >= 0 {
					if j == winner {
						assert.NoError(rt, errs[j], "client %d was first on %d of %d nodes", j, firsts[j], n)
					} else {
						assert.Error(rt, errs[j], "client %d, not the winner %d", j, winner)
					}
				}
			}
			require.LessOrEqual(rt, held, 1, "two holders of one key")
			for _, l := range locks {
				if l != nil {
					require.NoError(rt, l.Release(context.Background()))
				}
			}
			synctest.Wait()
			for _, nd := range c.nodes {
				nd.delayAcquireBy(func(string) time.Duration { return 0 })
			}
			requireNoUnvouchedEpoch(rt, c, "job")
			for i, nd := range c.nodes {
				require.False(rt, nd.Has("job"), "node %d keeps the key", i)
			}
			l, err := c.rl.TryAcquire(context.Background(), "job", 10*time.Second)
			require.NoError(rt, err, "the key after the race")
			require.NoError(rt, l.Release(context.Background()))
			synctest.Wait()
		})
	})
}

// The nodes that said "taken" to a split first use are asked again; one that
// does not answer then may still hold a live lock's key, so the vote is no
// first use. Kleppmann's amnesia case on 5 nodes (A holds the key on nodes
// 0-2, node 0 lost its data): B gets nodes 0, 3 and 4 on epochs created just
// now and "taken" from nodes 1 and 2, which then answer B's second calls
// only after the per-node timeout. B must not hold the key.
func TestAmnesiaGuard_SplitFirstUseAskedAgainWithoutAnswerIsNoFirstUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opts := []redlock.Option{redlock.WithQuarantine(time.Minute)}
		c, _, a := amnesiaSetUp(t, opts...)
		b := c.secondClient(t, append(opts, ownerGen("B"))...)
		for _, i := range []int{1, 2} {
			var calls atomic.Int32
			c.nodes[i].delayAcquireBy(func(owner string) time.Duration {
				if strings.HasPrefix(owner, "B-") && calls.Add(1) > 1 {
					return 2 * time.Second // the per-node timeout is 100 ms
				}
				return 0
			})
		}
		_, err := b.TryAcquire(context.Background(), "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "B would hold A's lock")
		qe := quorumError(t, err)
		assert.Equal(t, redlock.OutcomeTimedOut, qe.Nodes[1].Outcome, "node 1 was asked again")
		_ = a.Release(context.Background()) // on 2 of 5 nodes since node 0's loss
		time.Sleep(3 * time.Second)
		c.requireGone(t, "report")
	})
}
