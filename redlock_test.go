package redlock_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The tests in this file run inside testing/synctest bubbles: time is fake,
// so "elapsed" below is exactly the time the library waited for nodes,
// timers and retries, independent of the machine's speed.

const (
	ttl10s = 10 * time.Second
	// defaultTimeout10s is the default per-node timeout for a 10 s TTL: 1%.
	defaultTimeout10s = 100 * time.Millisecond
)

func TestAcquireExtendRelease_HappyPath(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("%d nodes", n), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newCluster(t, n)
				assert.Equal(t, n/2+1, c.rl.Quorum())

				start := time.Now()
				l := c.acquire(t, ctx, "report", ttl10s)
				assert.Zero(t, time.Since(start), "nodes answer at once; Acquire must not wait for anything else")

				drift := redlock.Drift(ttl10s, redlock.DefaultDriftFactor)
				assert.Equal(t, "report", l.Key())
				assert.Equal(t, ttl10s, l.TTL())
				assert.Equal(t, 1, l.Attempts())
				// A fresh key's counters are seeded with the client's
				// proposal (its clock in µs), which every node
				// accepts, and incremented with the grant: they agree, so no
				// write-back is needed.
				token := firstToken(start)
				assert.Equal(t, token, l.Token(), "first holder of a fresh key")
				assert.Equal(t, ttl10s-drift, l.ValidUntil().Sub(start))
				assert.Equal(t, ttl10s-drift, l.Validity())
				granted := 0
				for _, r := range l.Nodes() {
					assert.Contains(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomePending}, r.Outcome)
					if r.Outcome == redlock.OutcomeGranted {
						granted++
					}
				}
				assert.GreaterOrEqual(t, granted, c.rl.Quorum())

				// Once the stragglers are done, every node holds the owner
				// value with the full TTL and the token as its counter.
				synctest.Wait()
				for i, nd := range c.nodes {
					assert.Equal(t, l.Owner(), nd.Value("report"), "node %d", i)
					assert.Equal(t, ttl10s, nd.m.TTL("report"), "node %d", i)
					assert.Equal(t, strconv.FormatUint(token, 10), nd.Value("{report}:fence"), "node %d", i)
				}

				time.Sleep(3 * time.Second)
				assert.Equal(t, ttl10s-3*time.Second-drift, l.Validity())
				extStart := time.Now()
				l2, err := l.Extend(ctx, ttl10s)
				require.NoError(t, err)
				assert.Equal(t, l.Token(), l2.Token(), "extend keeps the fencing token")
				assert.Equal(t, l.Owner(), l2.Owner())
				assert.Equal(t, ttl10s-drift, l2.ValidUntil().Sub(extStart))
				assert.Equal(t, ttl10s-3*time.Second-drift, l.Validity(), "the old handle keeps its deadline")
				synctest.Wait()
				for i, nd := range c.nodes {
					assert.Equal(t, ttl10s, nd.m.TTL("report"), "node %d: extend resets the TTL", i)
				}

				c.releaseAndRequireGone(t, ctx, l2, "report")

				// Released: the next holder gets it at once, with a higher token.
				l3 := c.tryAcquire(t, ctx, "report", ttl10s)
				assert.Equal(t, token+1, l3.Token(), "the counters agreed: each grant adds one")
				require.NoError(t, l3.Release(ctx))
			})
		})
	}
}

func TestRandomOwner(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		o, err := redlock.RandomOwner()
		require.NoError(t, err)
		raw, err := base64.RawURLEncoding.DecodeString(o)
		require.NoError(t, err)
		require.Len(t, raw, 16)
		require.False(t, seen[o], "owner %q returned twice", o)
		seen[o] = true
	}
}

func TestExtend_ExpiredLockIsNotRevived(t *testing.T) {
	t.Run("keys expired on every node", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, 3)
			l := c.acquire(t, ctx, "report", time.Second)
			time.Sleep(time.Second + time.Millisecond)

			l2, err := l.Extend(ctx, ttl10s)
			assert.Nil(t, l2)
			require.ErrorIs(t, err, redlock.ErrNotHeld)
			c.requireGone(t, "report")
		})
	})
	t.Run("local validity over, keys still on the nodes", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, 3)
			l := c.acquireSettled(t, ctx, "report", time.Second)
			// Validity is ttl − drift = 988 ms; the keys live 1 s.
			time.Sleep(l.Validity() + time.Millisecond)
			require.Equal(t, 3, c.holders("report"))

			l2, err := l.Extend(ctx, ttl10s)
			assert.Nil(t, l2)
			require.ErrorIs(t, err, redlock.ErrNotHeld)
			synctest.Wait()
			for i, nd := range c.nodes {
				assert.LessOrEqual(t, nd.m.TTL("report"), 11*time.Millisecond, "node %d: TTL must not be reset", i)
			}
			time.Sleep(20 * time.Millisecond)
			c.requireNoKey(t, "report")
		})
	})
	t.Run("keys gone from the nodes while still valid locally", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := newCluster(t, 3)
			l := c.acquireSettled(t, ctx, "report", ttl10s)
			for _, nd := range c.nodes {
				nd.m.Del("report") // e.g. a node restarted without persistence
			}
			l2, err := l.Extend(ctx, ttl10s)
			assert.Nil(t, l2)
			require.ErrorIs(t, err, redlock.ErrNotHeld)
			qe := quorumError(t, err)
			assert.Equal(t, redlock.OpExtend, qe.Op)
			assert.Zero(t, qe.Granted)
			for _, r := range qe.Nodes {
				assert.Contains(t, []redlock.Outcome{redlock.OutcomeNotHeld, redlock.OutcomePending}, r.Outcome)
			}
			c.requireGone(t, "report")
		})
	})
}

func TestExtend_TakenOnMajorityIsNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquireSettled(t, ctx, "report", ttl10s)
		// Our keys vanished on two nodes and another client took them.
		c.holdElsewhere(t, "report", 5*time.Second, 0, 1)

		_, err := l.Extend(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		synctest.Wait()
		for _, i := range []int{0, 1} {
			assert.Equal(t, "someone-else", c.nodes[i].Value("report"))
			assert.Equal(t, 5*time.Second, c.nodes[i].m.TTL("report"), "node %d: another owner's TTL must not change", i)
		}
		require.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld, "taken on a majority; our key on node 2 still goes")
		synctest.Wait() // the deletes Release did not wait for
		assert.False(t, c.nodes[2].Has("report"))
		assert.Equal(t, 2, c.holders("report"))
	})
}

func TestExtend_NoQuorumKeepsOldDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquireSettled(t, ctx, "report", ttl10s)
		c.nodes[0].Refuse()
		c.nodes[1].Refuse()

		l2, err := l.Extend(ctx, ttl10s)
		assert.Nil(t, l2)
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		assert.NotErrorIs(t, err, redlock.ErrNotHeld)
		qe := quorumError(t, err)
		assert.Equal(t, redlock.OutcomeUnreachable, qe.Nodes[0].Outcome)
		assert.Equal(t, redlock.OutcomeUnreachable, qe.Nodes[1].Outcome)
		assert.Equal(t, ttl10s-redlock.Drift(ttl10s, redlock.DefaultDriftFactor), l.Validity(), "the lock stays valid until its deadline")
	})
}

func TestRelease_ExpiredEverywhereIsNotHeldPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		l := c.acquire(t, ctx, "report", time.Second)
		time.Sleep(2 * time.Second)

		start := time.Now()
		err := l.Release(ctx)
		assert.Zero(t, time.Since(start), "every node answers at once: no waiting, no retry")
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		qe := quorumError(t, err)
		assert.Equal(t, redlock.OpRelease, qe.Op)
		requireDecidedBy(t, qe.Nodes, redlock.OutcomeNotHeld, 3)

		// Releasing twice is the same.
		require.ErrorIs(t, l.Release(ctx), redlock.ErrNotHeld)
	})
}

func TestRelease_TakenBySomeoneElseIsNotDeleted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquire(t, ctx, "report", time.Second)
		time.Sleep(2 * time.Second) // we paused; the lock expired
		next := c.acquireSettled(t, ctx, "report", ttl10s)

		err := l.Release(ctx)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		qe := quorumError(t, err)
		requireDecidedBy(t, qe.Nodes, redlock.OutcomeTaken, 2)
		synctest.Wait() // the last node's answer
		for i, nd := range c.nodes {
			assert.Equal(t, next.Owner(), nd.Value("report"), "node %d: the new holder's key must stay", i)
		}
		require.NoError(t, next.Release(ctx))
	})
}

func TestRelease_MajorityUnreachableIsNoQuorum(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquireSettled(t, ctx, "report", ttl10s)
		c.nodes[1].Refuse()
		c.nodes[2].Refuse()

		err := l.Release(ctx)
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		qe := quorumError(t, err)
		// Two unreachable nodes decide it: the reachable node's delete
		// may still be on its way.
		assert.Contains(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomePending}, qe.Nodes[0].Outcome)
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeUnreachable, redlock.OutcomeUnreachable}, outcomes(qe.Nodes[1:]))
		synctest.Wait()
		assert.False(t, c.nodes[0].Has("report"), "the reachable node is released")
	})
}

func TestRelease_RunsWithCanceledContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		l, err := c.rl.Acquire(context.Background(), "report", ttl10s)
		require.NoError(t, err)
		synctest.Wait()

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		c.releaseAndRequireGone(t, ctx, l, "report")
	})
}

func TestLock_SafeForConcurrentUse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		l := c.acquire(t, ctx, "report", ttl10s)
		key, owner, token, until := l.Key(), l.Owner(), l.Token(), l.ValidUntil()

		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for range 50 {
					assert.Equal(t, key, l.Key())
					assert.Equal(t, owner, l.Owner())
					assert.Equal(t, token, l.Token())
					assert.True(t, until.Equal(l.ValidUntil()))
					_ = l.Validity()
					_ = l.AcquiredAt()
					_ = l.TTL()
					_ = l.Attempts()
					nodes := l.Nodes()
					nodes[0].Outcome = redlock.OutcomeError // a copy: must not show through
					nodes[0].Node = "scribbled"
				}
				if g%4 == 0 {
					l2, err := l.Extend(ctx, ttl10s)
					if assert.NoError(t, err) {
						assert.Equal(t, owner, l2.Owner())
					}
				}
			})
		}
		wg.Wait()
		for _, r := range l.Nodes() {
			assert.NotEqual(t, "scribbled", r.Node)
			assert.NotEqual(t, redlock.OutcomeError, r.Outcome)
		}
		require.NoError(t, l.Release(ctx))
	})
}

func TestClose_WaitsForStragglers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		c.nodes[2].Slow(2 * time.Second)
		l := c.acquire(t, ctx, "report", ttl10s)
		assert.Contains(t, []redlock.Outcome{redlock.OutcomePending, redlock.OutcomeTimedOut}, l.Nodes()[2].Outcome)

		start := time.Now()
		require.NoError(t, c.rl.Close())
		// The straggler waits for its reply: Close waits for it one
		// per-node timeout, then gives the calls it stopped their grace.
		assert.Equal(t, defaultTimeout10s+redlock.CloseGrace, time.Since(start))
		require.NoError(t, c.rl.Close(), "Close is idempotent")
	})
}

// The acquire script errors on node 2, so A holds the key
// on nodes 0 and 1 with TTL 10 s. A shorter Extend applies on node 0,
// errors on node 1 and finds node 2 not held: it fails. 300 ms later B must
// not acquire while A's handle is valid. The same for the old handle after a
// successful shorter Extend. Extend never shortens a key's TTL.
func TestExtend_ShorterNeverEndsAnEarlierHandle(t *testing.T) {
	for _, ok := range []bool{false, true} {
		t.Run(map[bool]string{false: "failed extend", true: "successful extend"}[ok], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newCluster(t, 3)
				b := c.secondClient(t)
				if !ok {
					c.nodes[2].FailIf(func(cmd string, args []string) bool { return isScript("acquire", cmd, args) })
				}
				a := c.tryAcquire(t, ctx, "report", ttl10s)
				synctest.Wait()
				if !ok {
					c.nodes[1].FailIf(func(cmd string, args []string) bool { return isScript("extend", cmd, args) })
				}
				short, err := a.Extend(ctx, 200*time.Millisecond)
				if ok {
					require.NoError(t, err)
					assert.Positive(t, short.Validity())
				} else {
					require.Error(t, err)
					assert.Nil(t, short)
				}
				synctest.Wait()
				for i, nd := range c.nodes {
					if nd.Has("report") {
						assert.Equal(t, ttl10s, nd.m.TTL("report"), "node %d: not shortened", i)
					}
				}

				time.Sleep(300 * time.Millisecond)
				require.Positive(t, a.Validity())
				l, err := b.TryAcquire(ctx, "report", ttl10s)
				require.ErrorIs(t, err, redlock.ErrNotAcquired, "B acquired while A's handle reports %v", a.Validity())
				assert.Nil(t, l)
				assert.GreaterOrEqual(t, c.holders("report"), c.rl.Quorum(), "A's key is on a majority")
			})
		})
	}
}

// A longer Extend still lengthens the keys to the new TTL.
func TestExtend_LongerLengthensTheKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquireSettled(t, ctx, "report", ttl10s)
		l2, err := l.Extend(ctx, 30*time.Second)
		require.NoError(t, err)
		assert.Equal(t, 30*time.Second, l2.TTL())
		synctest.Wait()
		for i, nd := range c.nodes {
			assert.Equal(t, 30*time.Second, nd.m.TTL("report"), "node %d", i)
		}
	})
}

// 1,000 acquire + release cycles on distinct names leave
// no bookkeeping once the retention has passed, and tokens still increase
// for a name used again after it.
func TestRetention_IdleNamesLeaveNothing(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(map[bool]string{false: "guard off", true: "guard on"}[guard], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				opts := []redlock.Option{redlock.WithRetention(time.Hour)}
				if guard {
					opts = append(opts, redlock.WithQuarantine(time.Minute))
				} else {
					opts = append(opts, redlock.WithoutAmnesiaGuard())
				}
				c := newCluster(t, 3, opts...)
				names := 1000 // the count; the guard-off run only needs a few
				if !guard {
					names = 100
				}
				var last uint64
				for i := range names {
					l := c.tryAcquire(t, ctx, fmt.Sprintf("order:%d", i+1), ttl10s)
					require.NoError(t, l.Release(ctx))
					last = l.Token()
				}
				synctest.Wait()
				for i, nd := range c.nodes {
					assert.NotEmpty(t, nd.m.Keys(), "node %d keeps the names in use", i)
				}
				time.Sleep(time.Hour)
				for i, nd := range c.nodes {
					assert.Empty(t, nd.m.Keys(), "node %d: idle names must leave nothing", i)
				}
				l := c.tryAcquire(t, ctx, fmt.Sprintf("order:%d", names), ttl10s)
				assert.Greater(t, l.Token(), last, "a re-created counter starts above every earlier token")
			})
		})
	}
}

// A name in use keeps its bookkeeping: every extension refreshes it.
func TestRetention_RefreshedByExtensions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithRetention(time.Minute), redlock.WithQuarantine(30*time.Second))
		l, err := c.rl.Acquire(ctx, "report", ttl10s)
		require.NoError(t, err)
		for range 24 { // two minutes
			time.Sleep(5 * time.Second)
			l, err = l.Extend(ctx, ttl10s)
			require.NoError(t, err)
		}
		synctest.Wait()
		for i, nd := range c.nodes {
			assert.True(t, nd.Has("{report}:fence"), "node %d", i)
			assert.True(t, nd.Has("{report}:epoch"), "node %d", i)
			assert.Equal(t, time.Minute, nd.m.TTL("{report}:fence"), "node %d", i)
		}
	})
}

func TestWithRetention_Invalid(t *testing.T) {
	for _, opts := range [][]redlock.Option{
		{redlock.WithRetention(0)},
		{redlock.WithRetention(-time.Hour)},
		{redlock.WithRetention(1500 * time.Microsecond)},
		{redlock.WithRetention(time.Minute), redlock.WithQuarantine(2 * time.Minute)},
		{redlock.WithQuarantine(2 * time.Minute), redlock.WithRetention(time.Minute)},
	} {
		requireNewInvalid(t, "retention", opts...)
	}
}

// A TTL longer than the retention is refused by Acquire and by Extend.
func TestRetention_LongerTTLIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithRetention(time.Minute))
		_, err := c.rl.Acquire(ctx, "report", 2*time.Minute)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "retention")
		l := c.acquire(t, ctx, "report", time.Minute)
		_, err = l.Extend(ctx, 2*time.Minute)
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.Contains(t, err.Error(), "retention")
		c.requireNoKey(t, "other")
	})
}

// A lock kept alive survives rolling restarts of nodes
// without persistence: node 0 restarts empty, 700 ms later node 1 does; no
// one else ever held the key.
func TestKeepAlive_SurvivesRollingRestarts(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(map[bool]string{false: "guard off", true: "guard on"}[guard], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				var opts []redlock.Option
				if guard {
					opts = append(opts, redlock.WithQuarantine(time.Minute))
				} else {
					opts = append(opts, redlock.WithoutAmnesiaGuard())
				}
				c := newCluster(t, 3, opts...)
				l := c.acquire(t, ctx, "report", 900*time.Millisecond)
				lease, err := l.KeepAlive(ctx, redlock.WithExtendInterval(200*time.Millisecond))
				require.NoError(t, err)
				// The restarted node answers "not held" before the others'
				// grants decide the extension: only such an answer is put
				// back (a later one arrives once the extension is decided).
				time.Sleep(100 * time.Millisecond)
				c.nodes[1].Slow(time.Millisecond)
				c.nodes[2].Slow(time.Millisecond)
				c.nodes[0].m.FlushAll() // a restart without persistence
				time.Sleep(700 * time.Millisecond)
				c.nodes[0].Slow(time.Millisecond)
				c.nodes[1].Slow(0)
				c.nodes[1].m.FlushAll()
				time.Sleep(2 * time.Second)
				require.NoError(t, lease.Err(), "the lease must survive")
				synctest.Wait()
				assert.Equal(t, 3, c.holders("report"), "put back on every node")
				if guard {
					for i, nd := range c.nodes {
						assert.Equal(t, "1", nd.m.HGet("{report}:epoch", "trusted"), "node %d vouched by the holder", i)
						assert.Equal(t, strconv.FormatUint(l.Token(), 10), nd.Value("{report}:fence"), "node %d", i)
					}
				}
				c.releaseAndRequireGone(t, ctx, lease, "report")
			})
		})
	}
}

// The put-back never takes a node where another owner holds the key, and
// never happens when the extension lost its majority.
func TestExtend_PutsBackOnlyWhereFreeAndOnlyWithAMajority(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		l := c.acquireSettled(t, ctx, "report", ttl10s)
		c.nodes[1].m.Del("report")
		c.holdElsewhere(t, "report", ttl10s, 2)
		// Nodes 1 and 2 answer before the majority is reached: only nodes
		// that answered "not held" by then are put back.
		for _, i := range []int{0, 3, 4} {
			c.nodes[i].Slow(time.Millisecond)
		}
		l2, err := l.Extend(ctx, ttl10s)
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, redlock.OutcomeGranted, l2.Nodes()[1].Outcome, "put back")
		assert.Equal(t, redlock.OutcomeTaken, l2.Nodes()[2].Outcome)
		assert.Equal(t, l.Owner(), c.nodes[1].Value("report"), "put back where it was gone")
		assert.Equal(t, "someone-else", c.nodes[2].Value("report"), "never over another owner")

		// Now only nodes 0 and 1 hold it: no majority, nothing is put back.
		c.nodes[3].m.Del("report")
		c.nodes[4].m.Del("report")
		_, err = l2.Extend(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		synctest.Wait()
		assert.False(t, c.nodes[3].Has("report"), "a lock without its majority is not revived")
		assert.False(t, c.nodes[4].Has("report"), "a lock without its majority is not revived")
	})
}

// An Extend refused because the validity ran out says so
// without an empty node list.
func TestExtend_ValidityRanOutSaysNothingSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquire(t, ctx, "report", ttl10s)
		time.Sleep(ttl10s - redlock.Drift(ttl10s, redlock.DefaultDriftFactor) + 54*time.Millisecond)
		_, err := l.Extend(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.Equal(t, `redlock: lock not held: extend "report": validity ran out 54ms ago; nothing sent`, err.Error())
	})
}
