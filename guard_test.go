package redlock_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

// secondClient is another process's Client over the same nodes.
func (c *cluster) secondClient(t testTB, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	clients := make([]redis.UniversalClient, len(c.nodes))
	for i, nd := range c.nodes {
		clients[i] = nd.rc
	}
	rl, err := redlock.New(clients, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rl.Close()) })
	return rl
}

// amnesiaSetUp is Kleppmann's amnesia case on 5 nodes: A acquires while
// nodes 3 and 4 are unreachable, so A's keys are exactly on nodes 0, 1, 2;
// then 3 and 4 come back and node 0 loses its data.
func amnesiaSetUp(t *testing.T, opts ...redlock.Option) (*cluster, *redlock.Client, *redlock.Lock) {
	c := newCluster(t, 5, opts...)
	c.nodes[3].refused.Store(true)
	c.nodes[4].refused.Store(true)
	a, err := c.rl.Acquire(context.Background(), "report", 10*time.Second)
	require.NoError(t, err)
	// A's calls to nodes 3 and 4 may still be on their way (Acquire returns
	// at its majority): let them meet the refusal, or one could set A's key
	// there once the nodes are back.
	synctest.Wait()
	c.nodes[3].refused.Store(false)
	c.nodes[4].refused.Store(false)
	c.nodes[0].m.FlushAll()
	return c, c.secondClient(t, opts...), a
}

func TestAmnesiaGuard_RestartedNodeIsQuarantined(t *testing.T) {
	for _, fencing := range []bool{true, false} {
		t.Run(map[bool]string{true: "fencing", false: "no fencing"}[fencing], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opts := []redlock.Option{redlock.WithQuarantine(time.Minute), redlock.WithFencing(fencing)}
				_, b, a := amnesiaSetUp(t, opts...)

				_, err := b.TryAcquire(context.Background(), "report", 10*time.Second)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				qe := quorumError(t, err)
				// Node 0 lost its data; 1 and 2 hold A's key; 3 and 4 never saw
				// the key. The vote is lost after any three answers, so a node
				// may still be pending.
				want := []redlock.Outcome{redlock.OutcomeQuarantined, redlock.OutcomeTaken, redlock.OutcomeTaken,
					redlock.OutcomeQuarantined, redlock.OutcomeQuarantined}
				answered := 0
				for i, r := range qe.Nodes {
					if r.Outcome == redlock.OutcomePending {
						continue
					}
					answered++
					assert.Equal(t, want[i], r.Outcome, "node %d", i)
					if r.Outcome == redlock.OutcomeQuarantined {
						assert.Equal(t, time.Minute, r.QuarantineLeft, "node %d", i)
					}
				}
				assert.GreaterOrEqual(t, answered, 3)
				assert.Zero(t, qe.Granted, "no vote may count")
				assert.Positive(t, a.Validity(), "A still holds the lock")
			})
		})
	}
}

// Without the guard the same history gives a second holder while the first
// still holds the lock: the limit the guard exists for.
func TestAmnesiaGuard_OffAllowsSecondHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, b, a := amnesiaSetUp(t, redlock.WithFencing(false), noGuard)
		l, err := b.TryAcquire(context.Background(), "report", 10*time.Second)
		require.NoError(t, err)
		assert.Positive(t, a.Validity())
		assert.Positive(t, l.Validity())
	})
}

// Two single-node restarts without data, on 3 nodes: A holds a 20 s lock;
// node 0 goes down and comes back empty; A extends (node 0 is still down,
// so the extension does not put A's key back there); node 1 restarts
// empty. Nodes 0 and 1 have forgotten A's lock, and without the guard B
// takes it from them while A's validity is still about 19.8 s. With the
// guard, on by default, they are quarantined and B is refused.
func TestAmnesiaGuard_OnByDefault(t *testing.T) {
	for _, guard := range []bool{true, false} {
		t.Run(map[bool]string{true: "default", false: "WithoutAmnesiaGuard"}[guard], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				var opts []redlock.Option
				if !guard {
					opts = append(opts, redlock.WithoutAmnesiaGuard())
				}
				c := newCluster(t, 3, opts...)
				a := c.acquireSettled(t, ctx, "report", 20*time.Second)
				c.nodes[0].Refuse()
				c.nodes[0].m.FlushAll()
				a, err := a.Extend(ctx, 20*time.Second)
				require.NoError(t, err)
				synctest.Wait()
				c.nodes[0].Revive(t) // empty
				c.nodes[1].m.FlushAll()
				assert.Equal(t, 1, c.holders("report"), "only node 2 remembers A's lock")

				b, err := c.secondClient(t, opts...).TryAcquire(ctx, "report", 20*time.Second)
				v := a.Validity()
				assert.True(t, v > 18*time.Second && v <= 19800*time.Millisecond, "A's validity %v", v)
				if !guard {
					require.NoError(t, err, "the limit the guard exists for")
					assert.Positive(t, b.Validity())
					return
				}
				require.ErrorIs(t, err, redlock.ErrNotAcquired, "a second holder while A holds the lock")
				assert.ErrorIs(t, err, redlock.ErrTaken)
				qe := quorumError(t, err)
				assert.Zero(t, qe.Granted)
				for i, o := range outcomes(qe.Nodes) {
					want := []redlock.Outcome{redlock.OutcomeQuarantined, redlock.OutcomePending} // lost after two answers
					if i == 0 {
						// Both Clients share the node's go-redis pool, which may
						// still hold a connection from before the restart: its
						// first use fails (unreachable), a vote that does not
						// count either.
						want = append(want, redlock.OutcomeUnreachable)
					}
					if i == 2 {
						want = []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomePending}
					}
					assert.Contains(t, want, o, "node %d", i)
				}
			})
		})
	}
}

// The guard's cost on a key's first use: Acquire waits for every node's
// answer, but for a node that is down at most one per-node timeout (100 ms
// for a 10 s TTL), never longer, also with many first uses at once; a node
// that refuses connections costs nothing. Later uses decide at the majority.
func TestAmnesiaGuard_FirstUseWaitsAtMostOneNodeTimeout(t *testing.T) {
	for _, down := range []string{"blackholed", "refusing"} {
		t.Run(down, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, 3)
				if down == "blackholed" {
					c.nodes[2].Slow(time.Minute)
				} else {
					c.nodes[2].Refuse()
				}
				want := defaultTimeout10s
				if down == "refusing" {
					want = 0
				}
				start := time.Now()
				l := c.tryAcquire(t, ctx, "report", ttl10s)
				assert.Equal(t, want, time.Since(start), "first use")
				assert.Equal(t, ttl10s-redlock.Drift(ttl10s, redlock.DefaultDriftFactor)-want, l.Validity())
				require.NoError(t, l.Release(ctx))

				start = time.Now()
				l = c.tryAcquire(t, ctx, "report", ttl10s)
				assert.Zero(t, time.Since(start), "a later use decides at the majority")
				require.NoError(t, l.Release(ctx))

				var wg sync.WaitGroup
				start = time.Now()
				for i := range 50 { // more than a node client's pool (20 connections)
					wg.Go(func() {
						l, err := c.rl.TryAcquire(ctx, fmt.Sprintf("job-%d", i), ttl10s)
						if assert.NoError(t, err) {
							assert.LessOrEqual(t, time.Since(start), want, "first use of job-%d", i)
							assert.NoError(t, l.Release(ctx))
						}
					})
				}
				wg.Wait()
				if down == "refusing" {
					c.endRedials(2)
				}
			})
		})
	}
}

// The first use of a key counts every vote (no node has any history to
// forget), vouches for every node VouchDelay later, and the next holder
// needs no repair.
func TestAmnesiaGuard_FirstUseTrustsAllNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		ctx := context.Background()
		l := c.acquire(t, ctx, "report", 10*time.Second)
		first := firstToken(time.Now())
		assert.Equal(t, first, l.Token())
		synctest.Wait()
		for i, nd := range c.nodes {
			assert.Empty(t, nd.m.HGet("{report}:epoch", "trusted"), "node %d: vouched for before VouchDelay", i)
		}
		time.Sleep(redlock.VouchDelay)
		synctest.Wait() // the vouching
		for i, nd := range c.nodes {
			assert.Equal(t, "1", nd.m.HGet("{report}:epoch", "trusted"), "node %d", i)
		}
		require.NoError(t, l.Release(ctx))
		l2 := c.acquire(t, ctx, "report", 10*time.Second)
		assert.Equal(t, first+1, l2.Token())
		granted := 0
		for _, o := range outcomes(l2.Nodes()) {
			assert.NotEqual(t, redlock.OutcomeQuarantined, o)
			if o == redlock.OutcomeGranted {
				granted++
			}
		}
		assert.GreaterOrEqual(t, granted, c.rl.Quorum())
	})
}

// A first use with a minority unreachable still counts as new: a key's
// history lives on a majority.
func TestAmnesiaGuard_FirstUseWithMinorityDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 5, redlock.WithQuarantine(time.Minute))
		c.nodes[4].Refuse()
		_, err := c.rl.Acquire(context.Background(), "report", 10*time.Second)
		require.NoError(t, err)
	})
}

// Once the quarantine has passed, the restarted node's vote counts again;
// its counter is not trusted, so the token comes from every trusted node's
// counter and still exceeds the last holder's; the acquisition then vouches
// for every node.
func TestAmnesiaGuard_QuarantineEndsAndCounterIsRepaired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, b, a := amnesiaSetUp(t, redlock.WithQuarantine(time.Minute))
		// Node 0 forgot A's key, nodes 3 and 4 never had it: a majority
		// says A no longer holds the lock, although nodes 1 and 2 delete it.
		err := a.Release(ctx)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.LessOrEqual(t, quorumError(t, err).Granted, 2, "deleted by the time Release returned")
		synctest.Wait() // the deletes Release did not wait for
		assert.False(t, c.nodes[1].Has("report"))
		assert.False(t, c.nodes[2].Has("report"))

		// Only nodes 1 and 2 are trusted: no majority to vouch for the rest.
		_, err = b.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)

		time.Sleep(time.Minute)
		l, err := b.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err)
		assert.Greater(t, l.Token(), a.Token())
		time.Sleep(redlock.VouchDelay) // the grants that need no write-back are vouched for then
		synctest.Wait()
		for i, nd := range c.nodes {
			assert.Equal(t, "1", nd.m.HGet("{report}:epoch", "trusted"), "node %d", i)
		}
	})
}

func TestWithQuarantine_Negative(t *testing.T) {
	requireNewInvalid(t, "quarantine", redlock.WithQuarantine(-time.Second))
	requireNewInvalid(t, "WithoutAmnesiaGuard", redlock.WithQuarantine(0))
}

// Inspect shows each node's epoch: trusted after a guarded acquisition,
// absent on a node that lost its data.
func TestInspect_ShowsEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		l := c.acquireSettled(t, ctx, "job", 10*time.Second)
		time.Sleep(time.Second)
		c.nodes[1].m.FlushAll()
		states, err := c.rl.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.True(t, states[0].Trusted)
		assert.Equal(t, time.Second, states[0].EpochAge)
		assert.False(t, states[1].Trusted)
		assert.Equal(t, time.Duration(-1), states[1].EpochAge)
		require.NoError(t, l.Release(ctx))
	})
}

// Inspect shows a failed first use's epochs as void, with their age.
func TestInspect_ShowsVoidEpochs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		c.holdElsewhere(t, "job", time.Minute, 1, 2) // our grant on node 0 only
		_, err := c.rl.TryAcquire(ctx, "job", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		synctest.Wait() // the clean-up
		time.Sleep(time.Second)
		states, err := c.rl.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.True(t, states[0].Void)
		assert.False(t, states[0].Trusted)
		assert.False(t, states[0].Held)
		assert.Equal(t, time.Second, states[0].EpochAge, "a void epoch keeps its age")
		assert.False(t, states[1].Void)
		assert.Equal(t, time.Duration(-1), states[1].EpochAge)
	})
}

// On a key's first use with a node down, only the nodes that answered are
// counted as granted; the dead node keeps its own outcome.
func TestAmnesiaGuard_FirstUseDoesNotCountDeadNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		c.nodes[2].Refuse()
		l, err := c.rl.TryAcquire(context.Background(), "report", 10*time.Second)
		require.NoError(t, err)
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomeGranted, redlock.OutcomeUnreachable}, outcomes(l.Nodes()))
	})
}

// A release that reaches a node before the acquisition's write-back still
// vouches for it, so the node is not left quarantined.
func TestAmnesiaGuard_ReleaseVouchesWhereWriteBackIsLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		// Node 2 gets the write-back (the only call whose last argument is
		// the vouch flag "1") 50 ms late: the release overtakes it there.
		c.nodes[2].SlowIf(50*time.Millisecond, func(cmd string, args []string) bool {
			return cmd == "EVALSHA" && len(args) == 9 && args[7] == "1"
		})
		l := c.acquire(t, ctx, "report", 10*time.Second)
		require.NoError(t, l.Release(ctx))
		synctest.Wait()
		time.Sleep(time.Second)
		for i, nd := range c.nodes {
			assert.False(t, nd.Has("report"), "node %d", i)
			assert.Equal(t, "1", nd.m.HGet("{report}:epoch", "trusted"), "node %d", i)
		}
	})
}

func TestAcquire_KeyWithBracesButNoHashTag(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 1)
		_, err := c.rl.TryAcquire(context.Background(), "a}b", time.Second)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "hash tag")
		c.requireNoKey(t, "a}b")
		// Inspect names the same three keys: it refuses the same names.
		for _, bad := range []string{"a}b", "a{}b"} {
			_, err = c.rl.Inspect(context.Background(), bad)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, "Inspect(%q)", bad)
		}
	})
}

// Close may run while other goroutines acquire and release: no panic, no
// leak, and every call ends with a lock or an error.
func TestClose_ConcurrentWithAcquire(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		done := make(chan struct{})
		for i := range 8 {
			go func() {
				defer func() { done <- struct{}{} }()
				l, err := c.rl.TryAcquire(ctx, fmt.Sprintf("k%d", i), time.Second)
				if err == nil {
					_ = l.Release(ctx)
				}
			}()
		}
		require.NoError(t, c.rl.Close())
		for range 8 {
			<-done
		}
	})
}

// A late grant, a failed write-back and two data losses
// must not repeat a token. P: first use, released, every node trusted. Node
// 2 loses its data; A's grant on node 2 arrives after the vote was decided,
// its follow-up later still, and node 1 refuses every write-back. A
// releases, node 0 loses its data, more than the quarantine passes: B's
// token must exceed A's. The late node is vouched for (fault 3(d)).
func TestFencing_LateGrantAndFailedWriteBackNeverRepeatAToken(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		p := c.acquire(t, ctx, "report", 10*time.Second)
		require.NoError(t, p.Release(ctx))
		synctest.Wait()
		time.Sleep(time.Second)

		c.nodes[2].m.FlushAll()
		c.nodes[2].SlowScripts(50*time.Millisecond, "acquire", "fence")
		c.nodes[1].FailIf(func(cmd string, args []string) bool { return isScript("fence", cmd, args) })
		a := c.tryAcquire(t, ctx, "report", 10*time.Second)
		assert.Equal(t, redlock.OutcomePending, a.Nodes()[2].Outcome, "node 2's grant came after the decision")
		assert.Greater(t, a.Token(), p.Token())
		time.Sleep(200 * time.Millisecond)
		synctest.Wait()
		assert.Equal(t, "1", c.nodes[2].m.HGet("{report}:epoch", "trusted"), "the late node is vouched for")
		require.NoError(t, a.Release(ctx))

		c.nodes[0].m.FlushAll()
		time.Sleep(time.Minute + time.Second)
		b := c.tryAcquire(t, ctx, "report", 10*time.Second)
		assert.Greater(t, b.Token(), a.Token())
	})
}

// After a data loss on node 1 while node 2 is down, the
// key is acquired again within one quarantine (it used to fail for ever:
// the token needed every node's counter).
func TestAmnesiaGuard_OneNodeDownAndOneAmnesiacRecoversWithinAQuarantine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		first := c.acquire(t, ctx, "report", 10*time.Second)
		require.NoError(t, first.Release(ctx))
		synctest.Wait()
		c.nodes[1].m.FlushAll()
		c.nodes[2].Refuse()

		_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired, "node 1 may have forgotten a lock: quarantined")
		time.Sleep(time.Minute)
		l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "a free key must be acquired within one quarantine")
		assert.Greater(t, l.Token(), first.Token())
		synctest.Wait()
		assert.Equal(t, "1", c.nodes[1].m.HGet("{report}:epoch", "trusted"))
		require.NoError(t, l.Release(ctx))
		l, err = c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "and at once from then on")
		require.NoError(t, l.Release(ctx))
	})
}

// Node 2 down, the first use of a fresh key fails once
// on a transient write-back error; the key is acquired again at once: the
// failed attempt took back the epochs its grants created (it used to leave
// them unvouched, which quarantined the key for a whole quarantine).
func TestAmnesiaGuard_FailedFirstUseRecoversAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, redlock.WithQuarantine(time.Minute))
		c.nodes[2].Refuse()
		// Node 1's counter is ahead (a fresh key's epochs, a counter from an
		// earlier use): the counters disagree and node 0 needs the
		// write-back, which fails once.
		setCounterAhead(t, c.nodes[1], "report", time.Hour)
		var failures atomic.Int32
		c.nodes[0].FailIf(func(cmd string, args []string) bool {
			return isScript("fence", cmd, args) && failures.Add(1) == 1
		})
		_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.ErrorContains(t, err, "fencing write-back: the token is on 1 of 2 nodes needed (written to 127.0.0.1:7001/0 error)")
		synctest.Wait() // the clean-up
		requireNoUnvouchedEpoch(t, c, "report")
		l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "a free key must be acquired at once")
		require.NoError(t, l.Release(ctx))
	})
}

// Node 2 down, two clients take 20 fresh keys at once
// (several pods starting one cron job): every key is acquirable again at
// once, since the losers take back the epochs their grants created.
func TestAmnesiaGuard_ContendedFirstUsesRecoverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		other := c.secondClient(t, redlock.WithQuarantine(time.Minute))
		c.nodes[2].Refuse()
		var wg sync.WaitGroup
		for _, rl := range []*redlock.Client{c.rl, other} {
			for k := range 20 {
				wg.Go(func() {
					if l, err := rl.TryAcquire(ctx, fmt.Sprintf("cron:%d", k), 10*time.Second); err == nil {
						_ = l.Release(ctx)
					}
				})
			}
		}
		wg.Wait()
		synctest.Wait() // the losers' clean-ups
		for k := range 20 {
			requireNoUnvouchedEpoch(t, c, fmt.Sprintf("cron:%d", k))
			l, err := c.rl.TryAcquire(ctx, fmt.Sprintf("cron:%d", k), 10*time.Second)
			if assert.NoError(t, err, "key %d", k) {
				assert.NoError(t, l.Release(ctx))
			}
		}
		c.endRedials(2)
	})
}

// N=5, one or two random nodes (never more) lose their
// data before each acquisition and answer late: every acquisition succeeds
// at once, each token is higher than the last, and every node is trusted
// again after each holder.
func TestAmnesiaGuard_RepeatedMinorityWipesStayAvailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5, redlock.WithQuarantine(time.Minute))
		rng := rand.New(rand.NewPCG(9, 3))
		var last uint64
		for round := range 20 {
			for _, nd := range c.nodes {
				nd.SlowIf(0, func(string, []string) bool { return false })
			}
			for _, i := range rng.Perm(5)[:1+rng.IntN(2)] {
				c.nodes[i].m.FlushAll()
				c.nodes[i].SlowScripts(20*time.Millisecond, "acquire")
			}
			l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
			require.NoError(t, err, "round %d", round)
			assert.Greater(t, l.Token(), last, "round %d", round)
			last = l.Token()
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			for i, nd := range c.nodes {
				assert.Equal(t, "1", nd.m.HGet("{report}:epoch", "trusted"), "round %d, node %d", round, i)
			}
			require.NoError(t, l.Release(ctx))
			time.Sleep(time.Second)
		}
	})
}

// The write-back is owner-checked: one that reaches a node after our key
// left it must not count towards the write-back majority. Here A's key
// leaves node 1 through a clock jump (outside Redlock's limits) while A's
// write-back to node 1 is on its way, and B takes the key on nodes 1 and 2
// with a lower counter. Counting node 1 would hand A a lock that overlaps
// B's, with a token that does not order them; the owner check makes A fail.
func TestFencing_WriteBackIsOwnerChecked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, noGuard) // with the guard, A's first use would fail on node 2's "taken"
		b := c.secondClient(t, noGuard)
		c.warmUp(t)
		setCounterAhead(t, c.nodes[0], "report", time.Hour) // A's counters disagree: write-back to node 1
		c.holdElsewhere(t, "report", 5*time.Millisecond, 2) // node 2 refuses A, frees up at 5 ms
		c.nodes[1].SlowScripts(10*time.Millisecond, "fence")

		type result struct {
			l   *redlock.Lock
			err error
		}
		done := make(chan result)
		go func() {
			l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
			done <- result{l, err}
		}()
		time.Sleep(3 * time.Millisecond)
		c.nodes[1].m.FastForward(10 * time.Second) // A's key expires on node 1
		time.Sleep(3 * time.Millisecond)
		lb, err := b.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "B takes nodes 1 and 2")
		a := <-done
		if a.err == nil {
			assert.Greater(t, lb.Token(), a.l.Token(), "A got the lock after B: its token must be lower")
			assert.False(t, a.l.Validity() > 0 && lb.Validity() > 0, "A and B both hold the lock")
		}
		require.ErrorIs(t, a.err, redlock.ErrNotAcquired, "A's write-back majority is gone")
		assert.ErrorContains(t, a.err, "write-back")
	})
}

// The guard's limit counts a node that does not answer in time as
// unreachable: on 3 nodes, A holds the key on nodes 0 and 2 (node 1 was down
// and has no history), node 0 loses its data, and node 2, which still holds
// A's key, answers B too late. Nodes 0 and 1 both say "created just now", no
// node says "taken", and B gets the key while A holds it. The same data loss
// with every node answering is safe (node 2 says "taken"); on 5 nodes one
// data loss plus one slow node stays within the limit (docs/amnesia.md,
// Limits).
func TestAmnesiaGuard_EmptiedAndTimedOutMajorityLooksBrandNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		b := c.secondClient(t, redlock.WithQuarantine(time.Minute))
		c.nodes[1].Refuse() // down while A takes the key: no history there
		a := c.tryAcquire(t, ctx, "report", 10*time.Second)
		c.nodes[1].Revive(t)
		c.nodes[0].m.FlushAll()
		c.nodes[2].SlowScripts(time.Second, "acquire") // holds A's key, answers too late
		l, err := b.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "beyond the limit the key looks brand new")
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomeGranted, redlock.OutcomeTimedOut}, outcomes(l.Nodes()))
		assert.Positive(t, a.Validity())
		assert.Positive(t, l.Validity())
		c.nodes[2].SlowScripts(0, "acquire")
		c.endRedials(1)
	})
}

// The guard's limit: a data loss while other nodes are unreachable, so that
// every node holding the key's history is emptied or down (here a majority
// of the cluster: node 0 emptied, node 1 down), makes the key look brand new
// and a second holder gets it. At most a minority of the nodes may be
// emptied-or-down at once (docs/amnesia.md, Limits).
func TestAmnesiaGuard_MajorityEmptiedOrDownLooksBrandNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		b := c.secondClient(t, redlock.WithQuarantine(time.Minute))
		c.nodes[2].Refuse() // down while A takes the key: no history there
		a := c.tryAcquire(t, ctx, "report", 10*time.Second)
		c.nodes[2].Revive(t)
		c.nodes[0].m.FlushAll()
		c.nodes[1].Refuse()
		l, err := b.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "beyond the limit the key looks brand new")
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomeUnreachable, redlock.OutcomeGranted}, outcomes(l.Nodes()))
		assert.Positive(t, a.Validity())
		assert.Positive(t, l.Validity())
		c.endRedials(1)
	})
}

// requireNoUnvouchedEpoch requires that every node's epoch for key is
// trusted (a successful acquisition vouched for it), void (the failed
// attempt that created it took its grant back) or absent: none is left
// that would quarantine the node's votes although it lost no data.
func requireNoUnvouchedEpoch(t testTB, c *cluster, key string) {
	t.Helper()
	for i, nd := range c.nodes {
		epoch := "{" + key + "}:epoch"
		if nd.m.Exists(epoch) && nd.m.HGet(epoch, "void") != "1" {
			require.Equal(t, "1", nd.m.HGet(epoch, "trusted"), "node %d holds an unvouched epoch for %s (by %q)", i, key, nd.m.HGet(epoch, "by"))
		}
	}
}

// A first use that fails before a node's grant answers (nodes 0 and 2 held
// by someone else for a moment, node 1 slow but within the per-node
// timeout): the late grant's clean-up takes it back and voids the epoch it
// created, so once nodes 0 and 2 are free the key is acquired at once, as a
// brand new key.
func TestAmnesiaGuard_FirstUseWithALateGrantRecoversAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, redlock.WithQuarantine(time.Minute))
		// Nodes 0 and 2 say "taken" at once (keys of a holder without an
		// epoch, expiring at 500 ms): a majority answered, the vote is lost.
		c.holdElsewhere(t, "report", 500*time.Millisecond, 0, 2)
		c.nodes[1].SlowScripts(50*time.Millisecond, "acquire") // the per-node timeout is 100 ms
		_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken)
		assert.Equal(t, redlock.OutcomePending, quorumError(t, err).Nodes[1].Outcome, "node 1's grant must come after the decision")
		time.Sleep(time.Second)
		synctest.Wait() // node 1's late grant and its clean-up
		requireNoUnvouchedEpoch(t, c, "report")
		c.nodes[1].SlowScripts(0, "acquire")
		l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "a free key must be acquired at once")
		require.NoError(t, l.Release(ctx))
	})
}

// Failed attempts never quarantine a key that lost no data. Property, over
// generated schedules on N = 3 or 5 nodes with the guard on: a minority of
// the nodes down, up to three clients racing for one fresh key in each of a
// few rounds (split votes), each node's grants answering at once, before or
// after the vote is decided; once every call has finished, every epoch of
// the key is trusted or absent, and the key is acquired at once. (A grant
// that a node applies after the client gave up on its call is not covered:
// its delete can run first, and the epoch it creates waits for the next
// success to vouch for it, or for the quarantine.)
func TestAmnesiaGuard_FailedAttemptsLeaveNoUnvouchedEpoch(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			ctx := context.Background()
			guard := redlock.WithQuarantine(time.Minute)
			n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
			c := newWarmCluster(rt, n, guard) // scripts loaded: a delay is one call's
			clients := []*redlock.Client{c.rl, c.secondClient(rt, guard), c.secondClient(rt, guard)}
			down := rapid.IntRange(0, (n-1)/2).Draw(rt, "down")
			for _, i := range rapid.Permutation(seq(n)).Draw(rt, "order")[:down] {
				c.nodes[i].Refuse()
			}
			rt.Cleanup(func() { c.endRedials(seq(n)...) })
			delays := []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 50 * time.Millisecond}
			for round := range rapid.IntRange(1, 4).Draw(rt, "rounds") {
				for i, nd := range c.nodes {
					nd.SlowScripts(rapid.SampledFrom(delays).Draw(rt, fmt.Sprintf("round %d node %d delay", round, i)), "acquire")
				}
				var wg sync.WaitGroup
				for _, rl := range clients[:rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("round %d clients", round))] {
					wg.Go(func() {
						if l, err := rl.TryAcquire(ctx, "report", 10*time.Second); err == nil {
							_ = l.Release(ctx)
						}
					})
				}
				wg.Wait()
			}
			for _, nd := range c.nodes {
				nd.SlowScripts(0, "acquire")
			}
			time.Sleep(time.Second)
			synctest.Wait() // every late grant and clean-up
			requireNoUnvouchedEpoch(rt, c, "report")
			l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
			require.NoError(rt, err, "a key that lost no data must be acquired at once")
			require.NoError(rt, l.Release(ctx))
		})
	})
}

// seq returns 0, 1, ..., n-1.
func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// A node that really lost its data leaves its quarantine one quarantine
// after its new epoch was created, however many attempts fail meanwhile:
// each failed attempt voids the epoch its grant created, and the next grant
// there must keep the epoch's age (resetting it would quarantine the node
// for as long as attempts keep failing). Node 1 lost its data and node 2 is
// down: every attempt before the quarantine ends fails.
func TestAmnesiaGuard_FailedAttemptsDoNotProlongAQuarantine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithQuarantine(time.Minute))
		first := c.acquire(t, ctx, "report", 10*time.Second)
		require.NoError(t, first.Release(ctx))
		synctest.Wait()
		c.nodes[1].m.FlushAll()
		c.nodes[2].Refuse()

		for range 6 { // at 0 s, 10 s, ..., 50 s after node 1's epoch was created
			_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "node 1 may have forgotten a lock: quarantined")
			synctest.Wait() // the clean-up: node 1's epoch is void
			assert.Equal(t, "1", c.nodes[1].m.HGet("{report}:epoch", "void"))
			time.Sleep(10 * time.Second)
		}
		l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "one quarantine after node 1's epoch was created, its vote counts")
		assert.Greater(t, l.Token(), first.Token())
		require.NoError(t, l.Release(ctx))
		c.endRedials(2)
	})
}

// An epoch is void until a holder vouches for it: a grant creates it void,
// a grant that finds it void makes it its own (`by`) and leaves it void,
// and only vouching clears it. So an epoch whose vouching never landed on a
// node stays void whatever attempts follow, and the next successful holder
// vouches for it.
func TestAmnesiaGuard_EpochStaysVoidUntilVouched(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, redlock.WithQuarantine(time.Minute))
		// A failed first use (node 0 held by someone else for a moment)
		// leaves void epochs on nodes 1 and 2.
		c.holdElsewhere(t, "report", time.Second, 0)
		_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		synctest.Wait()
		for _, i := range []int{1, 2} {
			require.Equal(t, "1", c.nodes[i].m.HGet("{report}:epoch", "void"), "node %d", i)
		}
		time.Sleep(time.Second)

		// The holder's grants make the void epochs theirs; its vouching
		// (fence, and its release's) fails on node 2.
		c.nodes[2].FailIf(func(cmd string, args []string) bool {
			return isScript("fence", cmd, args) || isScript("release-vouch", cmd, args)
		})
		holder := c.acquire(t, ctx, "report", 10*time.Second)
		time.Sleep(redlock.VouchDelay)
		synctest.Wait()
		assert.Equal(t, holder.Owner(), c.nodes[2].m.HGet("{report}:epoch", "by"))
		assert.Equal(t, "1", c.nodes[2].m.HGet("{report}:epoch", "void"), "not vouched for: still void")
		for _, i := range []int{0, 1} {
			assert.Equal(t, "1", c.nodes[i].m.HGet("{report}:epoch", "trusted"), "node %d", i)
		}
		_ = holder.Release(ctx)
		synctest.Wait()
		c.nodes[2].FailIf(nil)
		time.Sleep(10 * time.Second) // the holder's key expires on node 2
		require.False(t, c.nodes[2].Has("report"))

		// Nodes 0 and 1 are held by someone else: the next attempt fails
		// after node 2 granted it (not counted; nodes 0 and 1 answer
		// later), and node 2's epoch stays void.
		c.holdElsewhere(t, "report", time.Second, 0, 1)
		c.nodes[0].SlowScripts(10*time.Millisecond, "acquire")
		c.nodes[1].SlowScripts(10*time.Millisecond, "acquire")
		_, err = c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken)
		assert.Equal(t, redlock.OutcomeQuarantined, quorumError(t, err).Nodes[2].Outcome)
		synctest.Wait() // the clean-up
		require.False(t, c.nodes[2].Has("report"), "the failed attempt's key is deleted")
		states, err := c.rl.Inspect(ctx, "report")
		require.NoError(t, err)
		assert.True(t, states[2].Void)

		// Once nodes 0 and 1 are free, their trusted votes decide, and the
		// holder vouches for node 2.
		time.Sleep(time.Second)
		l := c.acquire(t, ctx, "report", 10*time.Second)
		time.Sleep(redlock.VouchDelay)
		synctest.Wait()
		assert.Equal(t, "1", c.nodes[2].m.HGet("{report}:epoch", "trusted"))
		assert.Empty(t, c.nodes[2].m.HGet("{report}:epoch", "void"))
		require.NoError(t, l.Release(ctx))
	})
}

// A grant that a node applies after the vote stopped waiting for it (past
// the per-node timeout), and so after the failed attempt's clean-up, is
// deleted when its reply comes (the acquire call waits for it), and leaves
// an epoch no holder vouched for. The epoch is void, so the key is then
// acquired at once as a brand new key, not locked out for a quarantine.
func TestAmnesiaGuard_GrantAppliedAfterTheTimeoutDoesNotLockTheKeyOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		c.holdElsewhere(t, "report", 500*time.Millisecond, 0)
		c.nodes[1].SlowScripts(2*time.Second, "acquire") // the per-node timeout is 100 ms
		_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.Contains(t, []redlock.Outcome{redlock.OutcomePending, redlock.OutcomeTimedOut}, quorumError(t, err).Nodes[1].Outcome)
		c.nodes[1].SlowScripts(0, "acquire")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.False(t, c.nodes[1].Has("report"), "the late grant is deleted when its reply comes")
		states, err := c.rl.Inspect(ctx, "report")
		require.NoError(t, err)
		require.True(t, states[1].Void, "the late grant's epoch is void")
		time.Sleep(time.Second) // the other holder's key expired
		require.Equal(t, 0, c.holders("report"))
		l, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.NoError(t, err, "a free key whose only history is unvouched grants is acquired at once")
		require.NoError(t, l.Release(ctx))
	})
}

// A void epoch that a holder vouches for by putting its key back (Extend on
// a node that answered "not held") is trusted and no longer void: Inspect,
// and so `redlock status`, must not report it void.
func TestAmnesiaGuard_PutBackVouchesAVoidEpoch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, redlock.WithQuarantine(time.Minute))
		c.holdElsewhere(t, "report", time.Second, 0)
		_, err := c.rl.TryAcquire(ctx, "report", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		synctest.Wait()
		require.Equal(t, "1", c.nodes[2].m.HGet("{report}:epoch", "void"))
		time.Sleep(time.Second)

		c.nodes[2].Refuse()
		l := c.acquire(t, ctx, "report", 10*time.Second) // nodes 0 and 1: a brand-new key
		synctest.Wait()
		c.nodes[2].Revive(t)
		for c.nodes[2].rc.Ping(ctx).Err() != nil { // the pool drops its closed connections
		}
		// Node 2's "not held" comes before the majority decides the
		// extension: the key is put back there.
		c.nodes[0].SlowScripts(20*time.Millisecond, "extend")
		c.nodes[1].SlowScripts(20*time.Millisecond, "extend")
		l, err = l.Extend(ctx, 10*time.Second)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, l.Owner(), c.nodes[2].Value("report"), "the key is put back on node 2")
		assert.Equal(t, "1", c.nodes[2].m.HGet("{report}:epoch", "trusted"))
		states, err := c.rl.Inspect(ctx, "report")
		require.NoError(t, err)
		assert.True(t, states[2].Trusted)
		assert.False(t, states[2].Void, "a vouched epoch is not void")
		require.NoError(t, l.Release(ctx))
	})
}

// A grant whose token write-back had not answered when the write-back's
// majority decided is finished in the background even after the caller's
// context ends (a deferred cancel right after Acquire returns): its counter
// gets the token and its epoch the holder's vouching, like a late grant's.
// It used to be skipped (the write-back had been sent to it), and the
// canceled call left the node unvouched, its votes quarantined.
func TestAcquire_WriteBackStragglerIsFinishedAfterTheCallerCancels(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3, redlock.WithQuarantine(time.Minute))
		high := uint64(time.Now().UnixMicro()) + 1_000_000 // above the seeds
		require.NoError(t, c.nodes[0].m.Set("{report}:fence", strconv.FormatUint(high, 10)))
		// Node 2's client sends the write-back 10 ms late: after the
		// caller's cancel.
		c.nodes[2].rc.AddHook(slowSendHook{script: "fence", d: 10 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		l, err := c.rl.Acquire(ctx, "report", 10*time.Second)
		cancel() // as a caller's deferred cancel does
		require.NoError(t, err)
		require.Equal(t, high+1, l.Token())
		time.Sleep(time.Second)
		synctest.Wait()
		for i, nd := range c.nodes {
			assert.Equal(t, "1", nd.m.HGet("{report}:epoch", "trusted"), "node %d", i)
			v, _ := nd.m.Get("{report}:fence")
			assert.Equal(t, strconv.FormatUint(l.Token(), 10), v, "node %d", i)
		}
		require.NoError(t, l.Release(context.Background()))
	})
}

// slowSendHook delays the sending of one script's calls by d, in the
// client: a context that ends meanwhile stops the call before it is sent.
type slowSendHook struct {
	script string
	d      time.Duration
}

func (h slowSendHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h slowSendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h slowSendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[0] == "evalsha" && args[1] == redlock.ScriptHashes[h.script] {
			time.Sleep(h.d)
		}
		return next(ctx, cmd)
	}
}
