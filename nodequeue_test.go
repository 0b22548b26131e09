package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// dialCluster starts n test nodes and a Client that Dial connects to them,
// in memory, with poolSize connections per node. Each node's scripts are
// loaded first, so that every call is one EVALSHA.
func dialCluster(t *testing.T, n, poolSize int, opts ...redlock.Option) ([]*testNode, *redlock.Client) {
	t.Helper()
	nodes := make([]*testNode, n)
	urls := make([]string, n)
	for i := range n {
		nodes[i] = newTestNode(t, i)
		urls[i] = "redis://" + nodes[i].addr
		require.NoError(t, redlock.LoadScripts(context.Background(), nodes[i].rc))
	}
	rl, err := redlock.DialWith(urls, func(i int, o *redis.Options) {
		o.PoolSize = poolSize
		o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nodes[i].m.Dial() }
	}, opts...)
	require.NoError(t, err)
	// Registered after the nodes' clean-ups, so it runs before them.
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	return nodes, rl
}

// acquireCounter returns an option that counts acquisition attempts and the
// node results in them that were timed out.
func acquireCounter() (opt redlock.Option, attempts, timedOut *atomic.Int64) {
	attempts, timedOut = new(atomic.Int64), new(atomic.Int64)
	opt = redlock.WithObserver(redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op != redlock.OpAcquire {
			return
		}
		attempts.Add(1)
		for _, n := range e.Nodes {
			if n.Outcome == redlock.OutcomeTimedOut {
				timedOut.Add(1)
			}
		}
	}))
	return opt, attempts, timedOut
}

// TestDial_BurstOnASmallPool_NoNodeTimedOut: 40 acquisitions at once through
// node clients of 2 connections each, on nodes that take 10 ms per call. A
// node serves them 2 at a time, so the last calls wait 190 ms in the client
// for a connection, longer than the 100 ms per-node timeout; every node
// answers each call 10 ms after it was sent. No node may be reported timed
// out, every acquisition succeeds on its first attempt, and the queueing
// still counts in the elapsed time: each lock's validity is
// TTL − (now − the attempt's start) − drift, exactly.
func TestDial_BurstOnASmallPool_NoNodeTimedOut(t *testing.T) {
	const (
		calls = 40
		pool  = 2
		delay = 10 * time.Millisecond
		ttl   = 10 * time.Second // per-node timeout: 100 ms
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		count, attempts, timedOut := acquireCounter()
		nodes, rl := dialCluster(t, 3, pool, count)
		for _, n := range nodes {
			n.Slow(delay)
		}
		drift := redlock.Drift(ttl, redlock.DefaultDriftFactor)
		start := time.Now()
		locks := make([]*redlock.Lock, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				l, err := rl.TryAcquire(ctx, fmt.Sprintf("job-%02d", i), ttl)
				if !assert.NoError(t, err, "call %d", i) {
					return
				}
				assert.Equal(t, ttl-time.Since(start)-drift, l.Validity(), "call %d: validity from the attempt's start", i)
				locks[i] = l
			})
		}
		wg.Wait()
		assert.Greater(t, time.Since(start), 100*time.Millisecond, "the premise: calls queued for longer than a per-node timeout")
		assert.Zero(t, timedOut.Load(), "node results reported timed out")
		assert.Equal(t, int64(calls), attempts.Load(), "attempts: one per call")

		for i, l := range locks {
			if l != nil {
				// The acquisitions' stragglers still fill the queues: a
				// Release may return at its bound, its deletes queued.
				if err := l.Release(ctx); err != nil {
					require.True(t, releaseQueued(err), "call %d: %v", i, err)
				}
			}
		}
		// Release returns at its majority, or at its bound with deletes
		// queued: they run once the queues have emptied.
		time.Sleep(time.Second)
		synctest.Wait()
		require.NoError(t, rl.Close())
		synctest.Wait()
		for i := range calls {
			for j, n := range nodes {
				assert.False(t, n.Has(fmt.Sprintf("job-%02d", i)), "node %d holds job-%02d", j, i)
			}
		}
	})
}

// TestDial_QueueWaitEndsWithTheAttemptsBudget: when the client's queue is
// longer than an attempt can afford (a call that gets its connection after
// TTL − drift − per-node timeout − 1 ms could leave no validity), the calls
// still waiting give up with an error that says so, and the attempt fails;
// no lock is handed out with less validity than TTL − elapsed − drift from
// the attempt's start. Here: 20 acquisitions at once, one connection per
// node, 10 ms per call, a 100 ms TTL and a 20 ms per-node timeout: the budget
// ends 76 ms after the start, when 8 calls per node have had their turn (at
// 0, 10, …, 70 ms).
//
// The nodes admit the waiting calls in the same order, their attempts'
// start, so those 8 turns go to the same attempts on every node. A node's
// first call is whichever came first (its connection was free); its other 7
// turns go to the oldest attempts it has not served, decided attempts
// dropping their waiting calls. So, without fencing write-backs (which take
// turns of their own), the 7 oldest attempts each have every node's grant or
// a majority's: at least 7 locks, and no lost attempt had its turn on a node
// before a won one (except a won attempt that was some node's first call).
// In arrival order each node would serve its own subset of the attempts,
// and few would reach a majority in time.
func TestDial_QueueWaitEndsWithTheAttemptsBudget(t *testing.T) {
	const (
		calls   = 20
		delay   = 10 * time.Millisecond
		ttl     = 100 * time.Millisecond
		timeout = 20 * time.Millisecond
	)
	for _, tc := range []struct {
		fencing bool
		minWon  int64
	}{
		{fencing: false, minWon: 7},
		{fencing: true, minWon: 1}, // write-backs take some of the 8 turns
	} {
		t.Run(fmt.Sprintf("fencing=%v", tc.fencing), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				nodes, rl := dialCluster(t, 3, 1, redlock.WithNodeTimeout(timeout), redlock.WithFencing(tc.fencing))
				var mu sync.Mutex
				ran := make([][]string, len(nodes)) // the keys of the acquire calls each node ran, in order
				for i, n := range nodes {
					n.SlowIf(delay, func(cmd string, args []string) bool {
						if isScript("acquire", cmd, args) {
							mu.Lock()
							ran[i] = append(ran[i], args[2])
							mu.Unlock()
						}
						return cmd == "EVALSHA" || cmd == "EVAL"
					})
				}
				drift := redlock.Drift(ttl, redlock.DefaultDriftFactor)
				start := time.Now()
				var (
					wg         sync.WaitGroup
					won, lost  atomic.Int64
					queueFulls atomic.Int64
					winners    sync.Map // key → true
				)
				for i := range calls {
					wg.Go(func() {
						key := fmt.Sprintf("job-%02d", i)
						l, err := rl.TryAcquire(ctx, key, ttl)
						if err == nil {
							won.Add(1)
							winners.Store(key, true)
							assert.Equal(t, ttl-time.Since(start)-drift, l.Validity(), "call %d: validity from the attempt's start", i)
							assert.Positive(t, l.Validity(), "call %d", i)
							return
						}
						lost.Add(1)
						qe := quorumError(t, err)
						require.ErrorIs(t, err, redlock.ErrNotAcquired)
						for _, n := range qe.Nodes {
							if n.Outcome == redlock.OutcomeTimedOut && n.Err != nil && strings.Contains(n.Err.Error(), "no free connection to the node") {
								assert.True(t, errors.Is(n.Err, context.DeadlineExceeded), "call %d: %v", i, n.Err)
								queueFulls.Add(1)
							}
						}
					})
				}
				wg.Wait()
				require.NoError(t, rl.Close()) // waits for the calls still running
				synctest.Wait()
				mu.Lock()
				defer mu.Unlock()
				t.Logf("%d acquired, %d failed, %d node results gave up waiting for a connection", won.Load(), lost.Load(), queueFulls.Load())
				for i := range ran {
					t.Logf("node %d ran the acquire calls of %v", i, ran[i])
				}
				assert.GreaterOrEqual(t, won.Load(), tc.minWon, "the attempts that had their turn on a majority in time acquire")
				assert.Positive(t, lost.Load(), "the premise: the queue is longer than the budget")
				assert.Positive(t, queueFulls.Load(), "the calls still queued at the budget's end give up")

				// Every node ran the calls after its first in one order.
				first := map[string]bool{}
				pos := make([]map[string]int, len(ran))
				for i, keys := range ran {
					require.NotEmpty(t, keys, "node %d ran no acquire call", i)
					first[keys[0]] = true
					pos[i] = map[string]int{}
					for p, k := range keys[1:] {
						pos[i][k] = p
					}
				}
				for i := range pos {
					for j := i + 1; j < len(pos); j++ {
						for a, pa := range pos[i] {
							for b, pb := range pos[i] {
								qa, okA := pos[j][a]
								qb, okB := pos[j][b]
								if okA && okB && pa < pb {
									assert.Less(t, qa, qb, "node %d ran %s before %s, node %d after", i, a, b, j)
								}
							}
						}
					}
				}
				if tc.fencing {
					return
				}
				// The won attempts are the oldest: no lost attempt had its
				// turn before a won one.
				for i, keys := range ran {
					lostSeen := ""
					for _, k := range keys[1:] {
						_, w := winners.Load(k)
						switch {
						case !w:
							lostSeen = k
						case lostSeen != "" && !first[k]:
							t.Errorf("node %d ran the lost attempt %s before the won %s", i, lostSeen, k)
						}
					}
				}
			})
		})
	}
}

// TestDial_DecidedVoteDropsQueuedCalls: a call still waiting for its turn
// when its attempt is decided is not sent: a straggler would only set a key
// to be cleaned up, load a busy node further, and hold up the Lock's
// Release. Node 2 takes 50 ms per call, nodes 0 and 1 take 10 ms: the 40
// acquisitions are all decided by nodes 0 and 1 within 200 ms, by which time
// node 2 has had about 10 of them; the rest are never sent to it.
func TestDial_DecidedVoteDropsQueuedCalls(t *testing.T) {
	const calls = 40
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		count, _, timedOut := acquireCounter()
		nodes, rl := dialCluster(t, 3, 2, count, noGuard)
		var ran [3]atomic.Int64
		for i, n := range nodes {
			d := 10 * time.Millisecond
			if i == 2 {
				d = 50 * time.Millisecond
			}
			n.SlowIf(d, func(cmd string, args []string) bool {
				if isScript("acquire", cmd, args) {
					ran[i].Add(1)
				}
				return cmd == "EVALSHA" || cmd == "EVAL"
			})
		}
		locks := make([]*redlock.Lock, calls)
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				l, err := rl.TryAcquire(ctx, fmt.Sprintf("job-%02d", i), 10*time.Second)
				if assert.NoError(t, err, "call %d", i) {
					locks[i] = l
				}
			})
		}
		wg.Wait()
		for i, l := range locks {
			if l != nil {
				require.NoError(t, l.Release(ctx), "call %d", i)
			}
		}
		// Release returns at its majority; Close waits for node 2's deletes.
		require.NoError(t, rl.Close())
		synctest.Wait()
		t.Logf("acquire scripts run per node: %d, %d, %d", ran[0].Load(), ran[1].Load(), ran[2].Load())
		assert.LessOrEqual(t, ran[2].Load(), int64(calls/2), "node 2 ran the calls decided before their turn")
		assert.Zero(t, timedOut.Load(), "node results reported timed out")
		for i := range calls {
			for j, n := range nodes {
				assert.False(t, n.Has(fmt.Sprintf("job-%02d", i)), "node %d holds job-%02d", j, i)
			}
		}
	})
}

// TestDial_ConnectionSetUpRunsInTheCommandsSlot: when go-redis opens a
// connection for a command that holds its node's slot, it first sends its
// own commands on it through the same hooks: HELLO, and a pipeline (SELECT,
// here, for database 1). They must run in the command's slot: with one
// connection per node, a set-up that waited for a slot of its own would wait
// for the command that waits for it, until the per-node timeout. Five
// acquisitions at once on fresh clients, each node opening its connection
// inside the first command: all succeed on their first attempt, no node is
// reported timed out, and every node saw the set-up.
func TestDial_ConnectionSetUpRunsInTheCommandsSlot(t *testing.T) {
	const calls = 5
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		count, attempts, timedOut := acquireCounter()
		nodes := make([]*testNode, 3)
		urls := make([]string, len(nodes))
		var setUp [3]atomic.Int64 // HELLO and SELECT seen per node
		for i := range nodes {
			nodes[i] = newTestNode(t, i)
			urls[i] = "redis://" + nodes[i].addr + "/1"
			require.NoError(t, redlock.LoadScripts(context.Background(), nodes[i].rc))
			nodes[i].SlowIf(0, func(cmd string, _ []string) bool {
				if cmd == "HELLO" || cmd == "SELECT" {
					setUp[i].Add(1)
				}
				return false
			})
		}
		rl, err := redlock.DialWith(urls, func(i int, o *redis.Options) {
			o.PoolSize = 1
			o.Dialer = func(context.Context, string, string) (net.Conn, error) { return nodes[i].m.Dial() }
		}, count)
		require.NoError(t, err)
		defer func() { require.NoError(t, rl.Close()) }()

		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				l, err := rl.TryAcquire(ctx, fmt.Sprintf("job-%d", i), 10*time.Second)
				if assert.NoError(t, err, "call %d", i) {
					assert.NoError(t, l.Release(ctx), "call %d", i)
				}
			})
		}
		wg.Wait()
		assert.Zero(t, timedOut.Load(), "node results reported timed out")
		assert.Equal(t, int64(calls), attempts.Load(), "attempts: one per call")
		for i := range nodes {
			assert.GreaterOrEqual(t, setUp[i].Load(), int64(2), "node %d: HELLO and SELECT on its connection", i)
		}
	})
}

// TestDial_ReleaseBehindABusyQueue: Release's deletes wait for their turn
// behind a queue of acquisitions on healthy nodes (one connection per node,
// 5 ms per call, 100 winners and losers at once on 10 keys). A delete's
// per-node timeout counts from its turn, as an acquisition's does, so no
// Release of a held lock fails on these healthy nodes (other than
// returning, after one per-node timeout, with the deletes still queued
// reported pending: they go on in the background); and a delete may
// wait until the key would be gone anyway, counted from when its SET ran
// (not from the attempt's start, which a queued SET follows), so after
// Close no key is left. Both failed before: Releases returned ErrNoQuorum
// with every node timed out, and with a 150 ms TTL keys outlived Close.
//
// With the 150 ms TTL the queue (100 calls × 5 ms on one connection, about
// 500 ms) can outlast the keys: a delete that gets its turn after its key
// expired finds it gone, and a majority of such answers makes Release return
// ErrNotHeld; that is allowed there, never ErrNoQuorum.
func TestDial_ReleaseBehindABusyQueue(t *testing.T) {
	const queueLength = 500 * time.Millisecond
	for _, ttl := range []time.Duration{150 * time.Millisecond, 500 * time.Millisecond} {
		t.Run(ttl.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, rl := dialCluster(t, 3, 1)
				for _, n := range nodes {
					n.Slow(5 * time.Millisecond)
				}
				var (
					wg      sync.WaitGroup
					mu      sync.Mutex
					relErrs []string
					won     atomic.Int64
				)
				for i := range 100 {
					wg.Go(func() {
						l, err := rl.TryAcquire(context.Background(), fmt.Sprint("b", i%10), ttl)
						if err != nil {
							return
						}
						won.Add(1)
						err = l.Release(context.Background())
						switch {
						case err == nil:
						case ttl < queueLength && errors.Is(err, redlock.ErrNotHeld):
							// the keys expired while the deletes waited
						case releaseQueued(err):
							// bounded: the deletes go on in the background
						default:
							mu.Lock()
							relErrs = append(relErrs, err.Error())
							mu.Unlock()
						}
					})
				}
				wg.Wait()
				require.NoError(t, rl.Close())
				require.Positive(t, won.Load(), "the premise: some acquisitions win")
				for i, n := range nodes {
					for k := range 10 {
						assert.False(t, n.Has(fmt.Sprint("b", k)), "node %d still holds b%d after Close", i, k)
					}
				}
				assert.Empty(t, relErrs, "Release failed on healthy nodes")
			})
		})
	}
}

// TestDial_FirstUseBehindABlackholedNode: a node whose host vanished (it
// reads every request and never answers) costs an acquisition at most one
// per-node timeout, even when the node's connections are all taken by
// earlier acquisitions' calls that still wait for their replies (an
// acquire call waits until its key would expire, or until go-redis's read
// timeout) and a later call queued behind them while they were not yet
// overdue. With the amnesia guard, a key's first use waits for every node's
// answer, so such a call held the acquisition until one of those
// connections came free: 5 s later (the read timeout), 4.6 s in benchmark
// case C4 "host". Ten first uses at once on nodes with two connections each:
// each must succeed within one per-node timeout of its call, the node that
// did not answer being timed out or pending, never granted.
func TestDial_FirstUseBehindABlackholedNode(t *testing.T) {
	const (
		calls = 10
		pool  = 2
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		nodes, rl := dialCluster(t, 3, pool)
		nodes[2].Slow(time.Minute)
		start := time.Now()
		var wg sync.WaitGroup
		for i := range calls {
			wg.Go(func() {
				l, err := rl.TryAcquire(ctx, fmt.Sprintf("job-%02d", i), ttl10s)
				if !assert.NoError(t, err, "call %d", i) {
					return
				}
				assert.LessOrEqual(t, time.Since(start), defaultTimeout10s, "call %d: acquisition with a blackholed node", i)
				assert.Contains(t, []redlock.Outcome{redlock.OutcomeTimedOut, redlock.OutcomePending}, l.Nodes()[2].Outcome, "call %d: node 2", i)
				assert.NoError(t, l.Release(ctx), "call %d", i)
			})
		}
		wg.Wait()
	})
}

// releaseQueued reports whether err is a Release that returned at its bound
// with deletes still queued behind the client's own calls: ErrNoQuorum,
// some node that did not answer pending (its delete not sent yet), none
// unreachable or failing (a delete sent after a wait in the queue may be
// timed out: the vote's time ran out before its answer).
func releaseQueued(err error) bool {
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNoQuorum) || !errors.As(err, &qe) {
		return false
	}
	pending := 0
	for _, r := range qe.Nodes {
		switch r.Outcome {
		case redlock.OutcomePending:
			pending++
		case redlock.OutcomeUnreachable, redlock.OutcomeError:
			return false
		}
	}
	return pending > 0
}
