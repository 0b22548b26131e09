package redlock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
)

// What a node holds, or how it fails, when Release reaches it.
type releaseCase int

const (
	ours    releaseCase = iota // our key: deleted (granted)
	gone                       // no key: expired (not-held)
	someone                    // another owner's key (taken)
	down                       // refuses connections (unreachable)
	broken                     // answers with an error (error)
)

var releaseCaseNames = [...]string{"ours", "gone", "someone", "down", "broken"}

func (rc releaseCase) String() string { return releaseCaseNames[rc] }

// wantRelease is the rule of Lock.Release: ErrNotHeld when a majority
// answered "not held" or "taken" (the lock expired or was taken before the
// call), ErrNoQuorum when fewer than a majority answered at all, else nil.
func wantRelease(nodes []releaseCase) error {
	quorum := len(nodes)/2 + 1
	deleted, notOurs := 0, 0
	for _, n := range nodes {
		switch n {
		case ours:
			deleted++
		case gone, someone:
			notOurs++
		}
	}
	switch {
	case notOurs >= quorum:
		return redlock.ErrNotHeld
	case deleted+notOurs < quorum:
		return redlock.ErrNoQuorum
	}
	return nil
}

// multisets returns every way to give n nodes one of the cases, up to the
// order of the nodes (the rule counts, it does not look at positions).
func multisets(n int, cases []releaseCase) [][]releaseCase {
	if n == 0 {
		return [][]releaseCase{nil}
	}
	var out [][]releaseCase
	for i, c := range cases {
		for _, rest := range multisets(n-1, cases[i:]) {
			out = append(out, append([]releaseCase{c}, rest...))
		}
	}
	return out
}

// A holder must learn that it overran its lock whatever the nodes it does
// not need say: every combination of node states for N = 3 and N = 5.
func TestRelease_AnswerDependsOnMajorityOnly(t *testing.T) {
	all := []releaseCase{ours, gone, someone, down, broken}
	for _, n := range []int{3, 5} {
		for _, nodes := range multisets(n, all) {
			want := wantRelease(nodes)
			t.Run(fmt.Sprint(nodes), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := context.Background()
					c := newCluster(t, n)
					l := c.tryAcquire(t, ctx, "report", ttl10s)
					synctest.Wait() // every node holds our key
					for i, st := range nodes {
						nd := c.nodes[i]
						switch st {
						case gone:
							nd.m.Del("report")
						case someone:
							require.NoError(t, nd.m.Set("report", "someone-else"))
						case down:
							nd.Refuse()
						case broken:
							nd.Fail("ERR out of order")
						}
					}
					err := l.Release(ctx)
					if want == nil {
						require.NoError(t, err)
					} else {
						require.ErrorIs(t, err, want)
						qe := quorumError(t, err)
						assert.Equal(t, redlock.OpRelease, qe.Op)
						// Release returns once the result is decided: a
						// delete may still be on its way then.
						assert.LessOrEqual(t, qe.Granted, strings.Count(fmt.Sprint(nodes), "ours"), "deleted")
						for _, other := range []error{redlock.ErrNotHeld, redlock.ErrNoQuorum} {
							if other != want {
								assert.NotErrorIs(t, err, other)
							}
						}
					}
					synctest.Wait() // the deletes Release did not wait for
					for i, st := range nodes {
						if st == ours {
							assert.False(t, c.nodes[i].Has("report"), "node %d: our key is deleted", i)
						}
						if st == someone {
							assert.Equal(t, "someone-else", c.nodes[i].Value("report"), "node %d: another owner's key stays", i)
						}
					}
					assert.LessOrEqual(t, l.Validity(), time.Duration(0), "released: not to be trusted")
					settleDials()
				})
			})
		}
	}
}

// The case that was reported: 3 nodes, a 300 ms lock, node 2 killed, and
// the holder calls Release 150 ms after its TTL. With all three nodes up the
// same call said ErrNotHeld; with node 2 down it said nil.
func TestRelease_OverrunIsNotHeldWithANodeDown(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(fmt.Sprintf("node 2 killed: %v", kill), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newCluster(t, 3)
				l := c.tryAcquire(t, ctx, "report", 300*time.Millisecond)
				synctest.Wait()
				if kill {
					c.nodes[2].Refuse()
				}
				time.Sleep(450 * time.Millisecond)
				err := l.Release(ctx)
				require.ErrorIs(t, err, redlock.ErrNotHeld)
				settleDials()
			})
		})
	}
}

// Validity is zero or negative once the lock must not be trusted, on every
// handle of it, although the deadline has not passed.
func TestLock_ValidityEndsWithTheLock(t *testing.T) {
	ctx := context.Background()
	t.Run("after Release, on every handle", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			l := c.acquire(t, ctx, "job", ttl10s)
			ext, err := l.Extend(ctx, ttl10s)
			require.NoError(t, err)
			require.Positive(t, l.Validity())
			require.NoError(t, ext.Release(ctx))
			assert.True(t, time.Now().Before(l.ValidUntil()), "the deadline is still ahead")
			assert.LessOrEqual(t, l.Validity(), time.Duration(0), "the original handle")
			assert.LessOrEqual(t, ext.Validity(), time.Duration(0), "the handle that was released")
		})
	})
	t.Run("after a failed Release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			l := c.acquireSettled(t, ctx, "job", ttl10s)
			c.nodes[0].Refuse()
			c.nodes[1].Refuse()
			require.ErrorIs(t, l.Release(ctx), redlock.ErrNoQuorum)
			assert.LessOrEqual(t, l.Validity(), time.Duration(0), "the caller gave the lock up")
			settleDials()
		})
	})
	t.Run("after the outer lock of a nested handle ended", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			var nested *redlock.Lock
			require.NoError(t, c.rl.Do(ctx, "job", ttl10s, func(ctx context.Context, _ *redlock.Lease) error {
				nested = c.acquire(t, ctx, "job", ttl10s)
				require.NoError(t, nested.Release(ctx), "a nested release leaves the lock held")
				assert.Positive(t, nested.Validity(), "still held by the outer Do")
				return nil
			}))
			assert.True(t, time.Now().Before(nested.ValidUntil()))
			assert.LessOrEqual(t, nested.Validity(), time.Duration(0))
		})
	})
	t.Run("on a Lease's handles after the lease was lost", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			l := c.acquire(t, ctx, "job", ttl10s)
			lease, err := l.KeepAlive(ctx)
			require.NoError(t, err)
			time.Sleep(4 * time.Second) // one extension
			latest := lease.Lock()
			require.NotSame(t, l, latest)
			for _, n := range c.nodes {
				require.NoError(t, n.m.Set("job", "thief"))
			}
			<-lease.Done()
			require.ErrorIs(t, lease.Err(), redlock.ErrLockLost)
			assert.True(t, time.Now().Before(latest.ValidUntil()), "lost before its deadline")
			for _, h := range []*redlock.Lock{l, latest, lease.Lock()} {
				assert.LessOrEqual(t, h.Validity(), time.Duration(0))
			}
			require.ErrorIs(t, lease.Release(ctx), redlock.ErrNotHeld)
		})
	})
	t.Run("not when the caller's context ends the Lease", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			l := c.acquire(t, ctx, "job", ttl10s)
			parent, cancel := context.WithCancel(ctx)
			lease, err := l.KeepAlive(parent)
			require.NoError(t, err)
			cancel()
			<-lease.Done()
			synctest.Wait()
			assert.Positive(t, l.Validity(), "not extended any more, but held until its deadline")
			require.NoError(t, lease.Release(ctx))
		})
	})
}

// Release does not wait for the node calls that an extension left running
// (the extension returned at its quorum): they end in the background, and
// Close waits for them.
func TestRelease_ExtensionStragglersEndBeforeClose(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		l := c.acquireSettled(t, ctx, "job", ttl10s)
		// Extensions are slow on node 2.
		c.nodes[2].SlowScripts(50*time.Millisecond, "extend")
		base := goleak.IgnoreCurrent()
		start := time.Now()
		ext, err := l.Extend(ctx, ttl10s)
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "Extend returns at its quorum")
		require.NoError(t, ext.Release(ctx))
		assert.Zero(t, time.Since(start), "Release returns at its majority")
		require.NoError(t, c.rl.Close())
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "Close waited for the extension's straggler")
		lc.verifyNone(t, base)
		c.requireNoKey(t, "job")
	})
}

// Release returns once a majority deleted the key; the slow node's delete
// ends in the background, and Close waits for it: after Release and Close
// no key is left anywhere, and no goroutine.
func TestRelease_ReturnsAtTheMajorityAndCloseWaitsForTheRest(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 5, noGuard)
		l := c.tryAcquire(t, ctx, "report", ttl10s)
		synctest.Wait()
		require.Equal(t, 5, c.holders("report"))
		// Node 4 answers deletes 80 ms late (within the 100 ms per-node
		// timeout); the others at once.
		c.nodes[4].SlowScripts(80*time.Millisecond, "release")
		base := goleak.IgnoreCurrent()
		start := time.Now()
		require.NoError(t, l.Release(ctx))
		assert.Zero(t, time.Since(start), "Release returned at the majority, before the slow node")
		assert.True(t, c.nodes[4].Has("report"), "the slow node's delete is still on its way")
		require.NoError(t, c.rl.Close())
		assert.Equal(t, 80*time.Millisecond, time.Since(start), "Close waited for the slow node's delete")
		c.requireNoKey(t, "report")
		lc.verifyNone(t, base)
	})
}

// When "not held" answers leave the result open at the majority of deletes'
// decision, Release waits for the answer that settles it, or for the
// per-node timeout, and no longer.
func TestRelease_WaitsOnlyUntilTheResultIsSettled(t *testing.T) {
	for _, tc := range []struct {
		name  string
		slow  releaseCase   // what node 3 holds
		delay time.Duration // node 3's delay on deletes
		want  error
		took  time.Duration
	}{
		{"the slow node deletes", ours, 50 * time.Millisecond, nil, 50 * time.Millisecond},
		{"the slow node says not held", gone, 50 * time.Millisecond, redlock.ErrNotHeld, 50 * time.Millisecond},
		{"the slow node times out", ours, 300 * time.Millisecond, nil, 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, 5, noGuard)
				l := c.tryAcquire(t, ctx, "report", ttl10s)
				synctest.Wait()
				// Nodes 0 and 1 lost the key, node 2 has it, node 4 is down:
				// node 3 decides between nil and ErrNotHeld.
				c.nodes[0].m.Del("report")
				c.nodes[1].m.Del("report")
				if tc.slow == gone {
					c.nodes[3].m.Del("report")
				}
				c.nodes[4].Refuse()
				c.nodes[3].SlowScripts(tc.delay, "release")
				start := time.Now()
				err := l.Release(ctx)
				assert.Equal(t, tc.took, time.Since(start))
				if tc.want == nil {
					require.NoError(t, err)
				} else {
					require.ErrorIs(t, err, tc.want)
				}
				require.NoError(t, c.rl.Close())
				answered := 4
				if tc.delay > 100*time.Millisecond {
					answered = 3 // node 3 never answered in time
				}
				for i := range answered {
					assert.False(t, c.nodes[i].Has("report"), "node %d", i)
				}
				settleDials()
			})
		})
	}
}

// TryAcquire adds its single-attempt policy to a copy of the options: the
// caller's slice, spare capacity included, is left as it was.
func TestTryAcquire_LeavesCallersOptionsAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		opts := make([]redlock.Option, 1, 2)
		opts[0] = redlock.WithKeyPrefix("lock:")
		l, err := c.rl.TryAcquire(context.Background(), "job", ttl10s, opts...)
		require.NoError(t, err)
		assert.Nil(t, opts[:2][1], "TryAcquire wrote into the spare capacity of the caller's slice")
		require.NoError(t, l.Release(context.Background()))
	})
}

// Acquire that finds the Client closed between attempts returns ErrClosed
// only after the node calls of its earlier attempts have ended.
func TestAcquire_ClosedBetweenAttemptsWaitsForNodeCalls(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3, noGuard)
		c.holdElsewhere(t, "job", time.Minute, 0, 1)
		c.nodes[2].SlowAcquire(50 * time.Millisecond)
		closing := make(chan struct{})
		retry := redlock.RetryFunc(func(int) (time.Duration, bool) {
			close(closing) // the first attempt failed: close during the wait
			return 10 * time.Millisecond, true
		})
		base := goleak.IgnoreCurrent()
		go func() {
			<-closing
			_ = c.rl.Close() // waits for the calls too, in its own goroutine
		}()
		start := time.Now()
		_, err := c.rl.Acquire(context.Background(), "job", ttl10s, redlock.WithRetry(retry))
		require.ErrorIs(t, err, redlock.ErrClosed)
		lc.verifyNone(t, goleak.IgnoreAnyFunction("github.com/d3b93e30/redlock.(*Client).Close"), base)
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "Acquire waited for the slow node's call")
		synctest.Wait()
		assert.False(t, c.nodes[2].Has("job"), "the late grant was undone")
	})
}

// A node that does not have the scripts cached (fresh, restarted, or its
// cache flushed) answers EVALSHA with NOSCRIPT; each call then falls back to
// EVAL with the script's source, on every operation.
func TestScripts_RunOnNodesWithoutThemCached(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		for round := range 2 {
			for _, nd := range c.nodes {
				require.NoError(t, nd.rc.ScriptFlush(ctx).Err())
			}
			l, err := c.rl.TryAcquire(ctx, "report", ttl10s)
			require.NoError(t, err, "round %d", round)
			for _, nd := range c.nodes {
				require.NoError(t, nd.rc.ScriptFlush(ctx).Err())
			}
			l, err = l.Extend(ctx, ttl10s)
			require.NoError(t, err, "round %d", round)
			for _, nd := range c.nodes {
				require.NoError(t, nd.rc.ScriptFlush(ctx).Err())
			}
			require.NoError(t, l.Release(ctx), "round %d", round)
			c.requireGone(t, "report") // the deletes Release did not wait for
		}
	})
}

// rewriteHook rewrites every command's arguments in place, as a user's
// go-redis hook may (here with the same values): each node's command must
// have arguments of its own.
type rewriteHook struct{}

func (rewriteHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (rewriteHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (rewriteHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		for i, v := range args {
			args[i] = v
		}
		return next(ctx, cmd)
	}
}

// Run with -race: a command's arguments shared by the nodes of a vote would
// be a data race as soon as a hook writes them.
func TestScripts_HooksMayRewriteArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		for _, nd := range c.nodes {
			nd.rc.AddHook(rewriteHook{})
		}
		for range 3 {
			l := c.tryAcquire(t, ctx, "report", ttl10s)
			l, err := l.Extend(ctx, ttl10s)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
		}
		c.requireGone(t, "report") // the deletes Release did not wait for
	})
}

// A straggler of the acquisition (its grant still on its way when Release
// starts) gets exactly one delete, sent after its grant, in the background:
// go-redis's pool does not keep the order of one node's commands, so a
// delete sent earlier could run before the SET and leave the key behind.
// Release does not wait for it; Close does.
func TestRelease_DeleteFollowsTheStragglersGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 5, noGuard)
		var (
			deletes  atomic.Int64
			deleteAt atomic.Int64 // fake time of node 4's delete, after start
		)
		start := time.Now()
		c.nodes[4].SlowIf(50*time.Millisecond, func(cmd string, args []string) bool {
			if isScript("release", cmd, args) {
				deletes.Add(1)
				deleteAt.Store(int64(time.Since(start)))
				return false // the release itself is not delayed
			}
			return isScript("acquire", cmd, args)
		})
		l := c.tryAcquire(t, ctx, "report", ttl10s)
		assert.Equal(t, redlock.OutcomePending, l.Nodes()[4].Outcome, "node 4 is a straggler")
		require.NoError(t, l.Release(ctx))
		assert.Zero(t, time.Since(start), "Release did not wait for the straggler")
		assert.Zero(t, deletes.Load(), "no delete sent before the straggler's grant")
		require.NoError(t, c.rl.Close())
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "Close waited for the straggler's delete")
		assert.Equal(t, int64(1), deletes.Load(), "one delete for the straggler")
		assert.Equal(t, 50*time.Millisecond, time.Duration(deleteAt.Load()), "sent once the grant had returned")
		c.requireNoKey(t, "report")
	})
}

// A node that answers more slowly than the others is never waited for, so
// nothing paces the calls sent to it. Once it has as many calls running
// after their votes were decided as its pool has connections, while the
// others keep up, acquisitions send it nothing (it counts as timed out, and
// needs no delete), so that go-redis's queue for it stays short and the
// deletes that follow its grants are not starved in it.
func TestAcquire_SlowNodeBacklogIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		nodes := []*testNode{newTestNode(t, 0), newTestNode(t, 1), newTestNode(t, 2)}
		slow := nodes[2].rc.Options()
		slow.PoolSize = 1 // at most 1 late call
		slowRC := redis.NewClient(slow)
		rl, err := redlock.New([]redis.UniversalClient{nodes[0].rc, nodes[1].rc, slowRC}, noGuard)
		require.NoError(t, err)
		for _, nd := range nodes {
			require.NoError(t, redlock.LoadScripts(ctx, nd.rc))
		}
		var (
			mu   sync.Mutex
			seen []string // keys of the acquire calls node 2 ran
		)
		nodes[2].SlowIf(50*time.Millisecond, func(cmd string, args []string) bool {
			if isScript("acquire", cmd, args) {
				mu.Lock()
				seen = append(seen, args[2])
				mu.Unlock()
			}
			return cmd == "EVALSHA" || cmd == "EVAL"
		})
		start := time.Now()
		var locks []*redlock.Lock
		for i := range 3 {
			l, err := rl.TryAcquire(ctx, fmt.Sprintf("job%d", i), ttl10s)
			require.NoError(t, err)
			require.NoError(t, l.Release(ctx))
			locks = append(locks, l)
		}
		assert.Zero(t, time.Since(start), "the slow node costs nothing")
		// Node 2 ran one of the three acquire calls: the first that got
		// going there outlived its vote, and while it runs node 2 is at its
		// limit of one late call while nodes 0 and 1 keep up, so the other
		// acquisitions do not ask it. That is job0's call, unless on a
		// loaded machine its goroutine started only after its vote was
		// decided: it was then late before it was sent, and was not sent
		// either (one of the later calls takes its place). Every job's
		// result for node 2 is pending, not timed out (the client's own
		// backlog is no fault of the node's).
		for _, l := range locks {
			shed := l.Nodes()[2]
			assert.Equal(t, redlock.OutcomePending, shed.Outcome)
			assert.NoError(t, shed.Err)
		}
		require.NoError(t, rl.Close())
		require.NoError(t, slowRC.Close())
		mu.Lock()
		assert.Len(t, seen, 1, "one acquisition was sent to node 2, the others not: %v", seen)
		mu.Unlock()
		for _, nd := range nodes {
			for i := range 3 {
				assert.False(t, nd.Has(fmt.Sprintf("job%d", i)), "%s: job%d", nd.addr, i)
			}
		}
	})
}

// A node the acquisition never asked (its call shed) can still get the key
// later: an Extend that a majority applies puts it back on the nodes that
// answered "not held". Release must then delete it there too, not skip the
// node because its acquire call was never sent. (A clean-clone CI run
// caught this as a rare interleaving of
// TestRelease_AfterALongerStragglingExtendLeavesNoKey: a call dropped while
// it waited for a connection, then put back by the extension.)
func TestRelease_DeletesWhereAnExtensionPutTheKeyOfAShedCall(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprint("oldHandle=", old), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				nodes := []*testNode{newTestNode(t, 0), newTestNode(t, 1), newTestNode(t, 2)}
				slow := nodes[2].rc.Options()
				slow.PoolSize = 1 // at most 1 late call
				slowRC := redis.NewClient(slow)
				defer func() { require.NoError(t, slowRC.Close()) }()
				rl, err := redlock.New([]redis.UniversalClient{nodes[0].rc, nodes[1].rc, slowRC}, noGuard)
				require.NoError(t, err)
				for _, nd := range nodes {
					require.NoError(t, redlock.LoadScripts(ctx, nd.rc))
				}
				var busySent atomic.Int32 // busy acquisitions node 2 runs
				nodes[2].SlowIf(50*time.Millisecond, func(cmd string, args []string) bool {
					if isScript("acquire", cmd, args) && strings.HasPrefix(args[2], "busy") {
						busySent.Add(1)
						return true
					}
					return false
				})
				// A busy acquisition whose call to node 2 outlives its vote
				// fills node 2's one late slot. (On a loaded machine that
				// call may start only after its vote was decided, and is
				// then not sent at all: try again.)
				var busy []*redlock.Lock
				for i := 0; busySent.Load() == 0; i++ {
					require.Less(t, i, 10, "no busy acquisition reached node 2")
					b, err := rl.TryAcquire(ctx, fmt.Sprint("busy", i), ttl10s)
					require.NoError(t, err)
					busy = append(busy, b)
					synctest.Wait()
				}
				l, err := rl.TryAcquire(ctx, "k", ttl10s)
				require.NoError(t, err)
				require.Equal(t, redlock.OutcomePending, l.Nodes()[2].Outcome, "k's call to node 2 was shed")
				time.Sleep(100 * time.Millisecond) // node 2 is free again
				require.False(t, nodes[2].Has("k"), "the shed call set nothing")
				// Node 1 answers the extension last, so the vote hears node
				// 2's "not held" before it is decided.
				nodes[1].SlowScripts(10*time.Millisecond, "extend")
				next, err := l.Extend(ctx, 20*time.Second)
				require.NoError(t, err)
				require.Equal(t, redlock.OutcomeGranted, next.Nodes()[2].Outcome, "the extension put k back on node 2")
				require.True(t, nodes[2].Has("k"))
				h := next
				if old {
					h = l
				}
				require.NoError(t, h.Release(ctx))
				for _, b := range busy {
					require.NoError(t, b.Release(ctx))
				}
				require.NoError(t, rl.Close())
				for i, nd := range nodes {
					assert.False(t, nd.Has("k"), "node %d still holds k", i)
				}
			})
		})
	}
}

// When every node is that busy (a burst of acquisitions on a small pool),
// no node lags behind a majority, so nothing is shed: the calls wait for a
// connection as before, within the per-node timeout.
func TestAcquire_BusyClusterShedsNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var clients []redis.UniversalClient
		for i := range 3 {
			nd := newTestNode(t, i)
			require.NoError(t, redlock.LoadScripts(ctx, nd.rc))
			nd.SlowAcquire(50 * time.Millisecond)
			o := nd.rc.Options()
			o.PoolSize = 1 // a backlog limit of 2 calls
			rc := redis.NewClient(o)
			t.Cleanup(func() { _ = rc.Close() })
			clients = append(clients, rc)
		}
		rl, err := redlock.New(clients, redlock.WithNodeTimeout(time.Second))
		require.NoError(t, err)
		defer func() { require.NoError(t, rl.Close()) }()
		var wg sync.WaitGroup
		locks := make([]*redlock.Lock, 4)
		for i := range locks {
			wg.Go(func() {
				l, err := rl.TryAcquire(ctx, fmt.Sprintf("job%d", i), time.Minute)
				assert.NoError(t, err, "job%d", i)
				locks[i] = l
			})
		}
		wg.Wait()
		for i, l := range locks {
			if l == nil {
				continue
			}
			for _, r := range l.Nodes() {
				assert.NotEqual(t, redlock.OutcomeTimedOut, r.Outcome, "job%d: %v", i, r.Err)
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}

// extendResult is what an Extend run by extendInBackground returned.
type extendResult struct {
	l   *redlock.Lock
	err error
}

// extendInBackground runs l.Extend(ctx, ttl) on another goroutine and
// returns the channel its result arrives on.
func extendInBackground(ctx context.Context, l *redlock.Lock, ttl time.Duration) <-chan extendResult {
	ch := make(chan extendResult, 1)
	go func() {
		next, err := l.Extend(ctx, ttl)
		ch <- extendResult{next, err}
	}()
	return ch
}

// An Extend on another goroutine may be putting the key back (reput) on a
// node that answered "not held" while Release runs: Release's delete there
// must not leave the key behind, whichever reaches the node first. Once
// Release and Close have returned, no node holds the key.
func TestRelease_RacingAnExtensionsPutBackLeavesNoKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3)
		l := c.acquireSettled(t, ctx, "k", ttl10s)
		c.nodes[2].m.Del("k") // node 2 restarted empty
		// The put-back reaches node 2 50 ms after it was sent.
		c.nodes[2].SlowScripts(50*time.Millisecond, "reput")
		// Node 1 answers the extension last, so the vote hears node 2's
		// "not held" before it is decided.
		c.nodes[1].SlowScripts(time.Millisecond, "extend")
		extended := extendInBackground(ctx, l, ttl10s)
		time.Sleep(10 * time.Millisecond) // the extension's vote is decided, its put-back in flight
		require.False(t, c.nodes[2].Has("k"), "the put-back has not run yet")
		require.NoError(t, l.Release(ctx))
		ext := <-extended
		require.ErrorIs(t, ext.err, redlock.ErrNotHeld, "the lock was released while the extension was in flight")
		require.Equal(t, redlock.OutcomeGranted, quorumError(t, ext.err).Nodes[2].Outcome, "the extension put k back on node 2")
		synctest.Wait()
		require.NoError(t, c.rl.Close())
		c.requireNoKey(t, "k")
	})
}

// An extension whose vote is decided after Release began puts nothing back:
// Release has sent its deletes (here node 2's, which held nothing, first),
// and a key put back after them would outlive Release and Close.
func TestRelease_NothingIsPutBackOnceReleaseBegan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		l := c.acquireSettled(t, ctx, "k", ttl10s)
		c.nodes[2].m.Del("k") // node 2 restarted empty
		// Nodes 0 and 1 apply the extension at 20 ms and the release's
		// deletes at 40 ms; node 2 answers both at once.
		c.nodes[0].SlowScripts(20*time.Millisecond, "extend")
		c.nodes[1].SlowScripts(20*time.Millisecond, "extend")
		extended := extendInBackground(ctx, l, ttl10s)
		time.Sleep(10 * time.Millisecond) // node 2 said "not held"; the vote waits for 0 and 1
		c.nodes[0].SlowScripts(30*time.Millisecond, "release")
		c.nodes[1].SlowScripts(30*time.Millisecond, "release")
		require.NoError(t, l.Release(ctx))
		ext := <-extended
		// A majority applied the extension before the deletes, but the
		// lock was released while it was in flight.
		require.ErrorIs(t, ext.err, redlock.ErrNotHeld)
		require.Equal(t, 2, quorumError(t, ext.err).Granted)
		synctest.Wait()
		require.NoError(t, c.rl.Close())
		c.requireNoKey(t, "k")
	})
}

// A failed Extend with a longer TTL that applied on one node, then Release
// behind a busy queue: does any key outlive Close?
func TestRelease_AfterAFailedLongerExtendLeavesNoKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes, rl := dialCluster(t, 3, 1)
		l, err := rl.Acquire(context.Background(), "k", 300*time.Millisecond)
		require.NoError(t, err)
		// The extension applies on one node that granted the key (on a
		// loaded machine the vote may decide before a third call is sent).
		applied := slices.IndexFunc(l.Nodes(), func(r redlock.NodeResult) bool { return r.Outcome == redlock.OutcomeGranted })
		for i, n := range nodes {
			if i != applied {
				n.FailIf(func(cmd string, args []string) bool { return isScript("extend", cmd, args) })
			}
		}
		_, err = l.Extend(context.Background(), 60*time.Second)
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		// The vote may be decided (two failures) before the third call has
		// applied: let it land.
		synctest.Wait()
		for _, n := range nodes {
			n.FailIf(nil)
		}
		require.True(t, nodes[applied].Has("k"))
		require.Greater(t, nodes[applied].m.TTL("k"), time.Second, "the failed extension applied there")
		// Busy queue: other keys' acquisitions, slow on every node.
		wait := fillQueues(rl, nodes, 50*time.Millisecond, 40, true)
		relErr := l.Release(context.Background())
		wait()
		require.NoError(t, rl.Close())
		t.Logf("release: %v", relErr)
		for i, n := range nodes {
			assert.False(t, n.Has("k"), "node %d still holds k after Release and Close (ttl %v)", i, n.m.TTL("k"))
		}
	})
}

// An Extend whose ctx ends while its calls are on the nodes, then Release
// right away (no busy queue).
func TestRelease_AfterACanceledExtendLeavesNoKey(t *testing.T) {
	for _, pool := range []int{1, 10} {
		t.Run(fmt.Sprint("pool", pool), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, rl := dialCluster(t, 3, pool)
				l, err := rl.Acquire(context.Background(), "k", 300*time.Millisecond)
				require.NoError(t, err)
				for _, n := range nodes {
					n.SlowScripts(50*time.Millisecond, "extend")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
				_, err = l.Extend(ctx, 60*time.Second)
				cancel()
				t.Logf("extend: %v", err)
				require.Error(t, err)
				relErr := l.Release(context.Background())
				t.Logf("release: %v", relErr)
				require.NoError(t, rl.Close())
				time.Sleep(time.Second) // past the original TTL
				for i, n := range nodes {
					assert.False(t, n.Has("k"), "node %d still holds k after Release and Close (ttl %v)", i, n.m.TTL("k"))
				}
			})
		})
	}
}

// Extend with a longer TTL (a straggling extension on node 2), then Release
// on the old and on the new handle behind a busy queue: no key is left once
// the queue emptied (Release itself may return first, with the deletes
// still queued reported pending).
func TestRelease_AfterALongerStragglingExtendLeavesNoKey(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprint("oldHandle=", old), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes, rl := dialCluster(t, 3, 1)
				l, err := rl.Acquire(context.Background(), "k", 300*time.Millisecond)
				require.NoError(t, err)
				nodes[2].SlowScripts(150*time.Millisecond, "extend")
				next, err := l.Extend(context.Background(), 20*time.Second)
				require.NoError(t, err)
				wait := fillQueues(rl, nodes, 50*time.Millisecond, 40, true)
				h := next
				if old {
					h = l
				}
				relErr := h.Release(context.Background())
				wait()
				require.NoError(t, rl.Close())
				t.Logf("release: %v", relErr)
				if relErr != nil {
					assert.True(t, releaseQueued(relErr), "only a Release bounded behind the queue may fail: %v", relErr)
				}
				for i, n := range nodes {
					assert.False(t, n.Has("k"), "node %d still holds k (ttl %v)", i, n.m.TTL("k"))
				}
			})
		})
	}
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
