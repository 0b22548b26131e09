package redlock_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
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

func TestAcquire_KeyPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithKeyPrefix("lock:"))
		l := c.acquireSettled(t, ctx, "report", ttl10s)
		assert.Equal(t, "report", l.Key())
		for _, nd := range c.nodes {
			assert.Equal(t, l.Owner(), nd.Value("lock:report"))
			assert.False(t, nd.Has("report"))
			assert.Equal(t, strconv.FormatUint(l.Token(), 10), nd.Value("{lock:report}:fence"))
		}
		c.releaseAndRequireGone(t, ctx, l, "lock:report")
	})
}

func TestAcquire_HeldElsewhereIsNotAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.holdElsewhere(t, "report", ttl10s, 0, 1, 2)

		l, err := c.rl.TryAcquire(ctx, "report", ttl10s)
		require.Nil(t, l)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		qe := quorumError(t, err)
		// The vote is decided as soon as two nodes refused; the third may
		// not have answered yet.
		taken := 0
		for _, r := range qe.Nodes {
			assert.Contains(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomePending}, r.Outcome)
			if r.Outcome == redlock.OutcomeTaken {
				taken++
			}
		}
		assert.GreaterOrEqual(t, taken, 2)
		assert.Zero(t, qe.Granted)
		synctest.Wait()
		for i, nd := range c.nodes {
			assert.Equal(t, "someone-else", nd.Value("report"), "node %d: the other owner's key must stay", i)
			assert.Equal(t, ttl10s, nd.m.TTL("report"), "node %d: and keep its TTL", i)
		}
	})
}

func TestAcquire_FencingTokensStrictlyIncrease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		// A second client over the same nodes: tokens come from the nodes,
		// not from client state.
		clients := make([]redis.UniversalClient, len(c.nodes))
		for i, nd := range c.nodes {
			clients[i] = nd.rc
		}
		other, err := redlock.New(clients)
		require.NoError(t, err)
		defer func() { require.NoError(t, other.Close()) }()

		var last uint64
		for i := range 8 {
			rl := c.rl
			if i%2 == 1 {
				rl = other
			}
			l, err := rl.Acquire(ctx, "report", time.Second)
			require.NoError(t, err, "holder %d", i)
			assert.Greater(t, l.Token(), last, "holder %d", i)
			last = l.Token()
			if i%3 == 2 {
				// This holder crashes: its keys expire instead.
				time.Sleep(time.Second + time.Millisecond)
				synctest.Wait()
				continue
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestAcquire_WithoutFencingTokenIsZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithFencing(false))
		for range 2 {
			l := c.acquire(t, ctx, "report", ttl10s)
			assert.Zero(t, l.Token())
			require.NoError(t, l.Release(ctx))
		}
		c.requireGone(t, "{report}:fence")

		// The option also works per call.
		l := c.acquire(t, ctx, "report", ttl10s, redlock.WithFencing(true))
		assert.Equal(t, firstToken(time.Now()), l.Token(), "seeded from the clock")
		require.NoError(t, l.Release(ctx))
	})
}

// A node whose clock is outside the window of the client's proposal (its
// clock more than 25 ms past the proposal, or more than 25 ms behind it)
// seeds a new counter from its own clock: the token is that clock in
// microseconds, incremented with the grant. Within the window, either way,
// it takes the proposal. The seed exceeds every token handed out before,
// whatever the client's clock says (docs/fencing.md).
func TestAcquire_NodeClockOutsideTheProposalSeedsTheCounter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		// Within the window, the fraction of a second counts: at .6 s past
		// a second, a node 20 ms behind that compared whole seconds only
		// would find the proposal a second in its future and seed its own
		// clock.
		time.Sleep(600 * time.Millisecond)
		for _, skew := range []time.Duration{0, 20 * time.Millisecond, -20 * time.Millisecond, 25 * time.Millisecond, -25 * time.Millisecond} {
			start := time.Now()
			for _, n := range c.nodes {
				n.m.SetTime(start.Add(skew))
			}
			key := fmt.Sprintf("report%v", skew)
			l := c.acquire(t, ctx, key, ttl10s)
			assert.Equal(t, firstToken(start), l.Token(), "node clock %v from the client's: the node accepts the proposal", skew)
			require.NoError(t, l.Release(ctx))
		}
		for _, skew := range []time.Duration{26 * time.Millisecond, -26 * time.Millisecond, time.Hour, -time.Hour} {
			nodeNow := time.Now().Add(skew)
			for _, n := range c.nodes {
				n.m.SetTime(nodeNow)
			}
			key := fmt.Sprintf("report%v", skew)
			l := c.acquire(t, ctx, key, ttl10s)
			assert.Equal(t, uint64(nodeNow.UnixMicro())+1, l.Token(), "node clock %v from the client's", skew)
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestAcquire_OwnerValuesAreRandomAndLong(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		seen := map[string]bool{}
		for range 20 {
			l := c.acquire(t, ctx, "report", ttl10s)
			raw, err := base64.RawURLEncoding.DecodeString(l.Owner())
			require.NoError(t, err, "owner %q", l.Owner())
			assert.GreaterOrEqual(t, len(raw)*8, 128, "owner %q", l.Owner())
			assert.False(t, seen[l.Owner()], "owner %q used twice", l.Owner())
			seen[l.Owner()] = true
			require.NoError(t, l.Release(ctx))
		}
	})
}

func TestAcquire_OwnerGenerator(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)

		n := 0
		gen := redlock.WithOwnerGenerator(func() (string, error) {
			n++
			return fmt.Sprintf("worker-7/%d", n), nil
		})
		l := c.acquire(t, ctx, "report", ttl10s, gen)
		assert.Equal(t, "worker-7/1", l.Owner())
		synctest.Wait()
		for _, nd := range c.nodes {
			assert.Equal(t, "worker-7/1", nd.Value("report"))
		}
		require.NoError(t, l.Release(ctx))

		// A failing generator is a failed acquisition that wraps its error;
		// one that returns "" is misconfigured (every holder would share
		// the value): bad input. Neither sends anything.
		boom := errors.New("entropy exhausted")
		for name, tc := range map[string]struct {
			gen  func() (string, error)
			want []error
		}{
			"error": {func() (string, error) { return "", boom }, []error{redlock.ErrNotAcquired, boom}},
			"empty": {func() (string, error) { return "", nil }, []error{redlock.ErrInvalidArgument}},
		} {
			l, err := c.rl.Acquire(ctx, "report", ttl10s, redlock.WithOwnerGenerator(tc.gen))
			assert.Nil(t, l, name)
			for _, want := range tc.want {
				assert.ErrorIs(t, err, want, name)
			}
			c.requireGone(t, "report")
		}
	})
}

func TestAcquire_NoKeyLeftAfterFailure(t *testing.T) {
	t.Run("refused by a majority", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3, noGuard)
			c.holdElsewhere(t, "report", ttl10s, 0, 1)
			_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			assert.False(t, c.nodes[2].Has("report"), "the node that granted is released before Acquire returns")
			require.NoError(t, c.rl.Close())
			synctest.Wait()
			assert.False(t, c.nodes[2].Has("report"))
			assert.Equal(t, 2, c.holders("report"), "the other owner's keys stay")
		})
	})

	// A grant that arrives after the attempt already failed (and after the
	// release was sent to that node) is undone as soon as it arrives.
	t.Run("late grant within the node timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newWarmCluster(t, 3, noGuard)
			c.holdElsewhere(t, "report", ttl10s, 0, 1)
			c.nodes[2].SlowAcquire(50 * time.Millisecond) // the release is not delayed

			start := time.Now()
			_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			qe := quorumError(t, err)
			assert.Equal(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomeTaken, redlock.OutcomePending}, outcomes(qe.Nodes))
			assert.Equal(t, 50*time.Millisecond, time.Since(start), "Acquire returns once the late grant is undone")
			assert.False(t, c.nodes[2].Has("report"), "the late grant is released before Acquire returns")
			require.NoError(t, c.rl.Close())
			synctest.Wait()
			assert.False(t, c.nodes[2].Has("report"))
		})
	})

	// A node so slow that the client gives up on it still runs the acquire
	// script later; the release sent after it runs after it.
	t.Run("grant applied after the node timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newWarmCluster(t, 3, noGuard)
			c.holdElsewhere(t, "report", ttl10s, 0)
			c.nodes[1].Slow(2 * time.Second)
			c.nodes[2].Slow(2 * time.Second)

			_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			assert.Equal(t, 1, c.holders("report"))
			require.NoError(t, c.rl.Close())
			time.Sleep(3 * time.Second) // the slow nodes catch up, well before the TTL
			synctest.Wait()
			assert.Equal(t, "someone-else", c.nodes[0].Value("report"))
			assert.False(t, c.nodes[1].Has("report"))
			assert.False(t, c.nodes[2].Has("report"))
		})
	})

	for _, tc := range []struct {
		name    string
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{"canceled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			go func() {
				time.Sleep(10 * time.Millisecond)
				cancel()
			}()
			return ctx, cancel
		}, context.Canceled},
		{"deadline exceeded", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 10*time.Millisecond)
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newWarmCluster(t, 3, noGuard)
				c.nodes[1].Slow(2 * time.Second)
				c.nodes[2].Slow(2 * time.Second)
				ctx, cancel := tc.ctx()
				defer cancel()

				start := time.Now()
				l, err := c.rl.Acquire(ctx, "report", ttl10s) // default retry: until ctx ends
				assert.Nil(t, l)
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				qe := quorumError(t, err)
				assert.Equal(t, redlock.OutcomeGranted, qe.Nodes[0].Outcome)
				assert.Equal(t, redlock.OutcomeCanceled, qe.Nodes[1].Outcome)
				assert.ErrorIs(t, qe.Nodes[1].Err, tc.wantErr)
				assert.Less(t, time.Since(start), 2*time.Second, "Acquire must not wait for the slow nodes")
				assert.False(t, c.nodes[0].Has("report"), "released before Acquire returns")

				require.NoError(t, c.rl.Close())
				time.Sleep(3 * time.Second)
				c.requireGone(t, "report")
			})
		})
	}
}

func TestAcquire_AtMostOneOfManyConcurrentClientsWins(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		var (
			mu      sync.Mutex
			winners []*redlock.Lock
			wg      sync.WaitGroup
		)
		for range 16 {
			wg.Go(func() {
				l, err := c.rl.TryAcquire(ctx, "report", ttl10s)
				if err != nil {
					assert.ErrorIs(t, err, redlock.ErrNotAcquired)
					return
				}
				mu.Lock()
				winners = append(winners, l)
				mu.Unlock()
			})
		}
		wg.Wait()
		synctest.Wait()
		require.LessOrEqual(t, len(winners), 1)
		// The losers cleaned up: every key left is the winner's.
		for i, nd := range c.nodes {
			if v := nd.Value("report"); v != "" {
				require.Len(t, winners, 1)
				assert.Equal(t, winners[0].Owner(), v, "node %d", i)
			}
		}
		for _, l := range winners {
			require.NoError(t, l.Release(ctx))
		}
		c.requireGone(t, "report") // the deletes Release did not wait for
	})
}

// The Redlock spec decides an attempt as soon as a majority granted it; a
// library that waits for every node after that lets one slow node slow down
// every acquisition.
func TestAcquire_SlowMinorityDoesNotDelay(t *testing.T) {
	for _, tc := range []struct{ nodes, slow int }{{3, 1}, {5, 2}, {7, 3}} {
		t.Run(fmt.Sprintf("%d of %d nodes slow", tc.slow, tc.nodes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, tc.nodes)
				c.useKey(t, "report") // not its first use: see TestAmnesiaGuard_FirstUseWaitsAtMostOneNodeTimeout
				slow := c.nodes[tc.nodes-tc.slow:]
				for _, nd := range slow {
					nd.Slow(2 * time.Second)
				}

				start := time.Now()
				l, err := c.rl.Acquire(ctx, "report", ttl10s)
				elapsed := time.Since(start)
				require.NoError(t, err)
				assert.Less(t, elapsed, defaultTimeout10s, "the slow minority must not delay Acquire")
				assert.Equal(t, ttl10s-redlock.Drift(ttl10s, redlock.DefaultDriftFactor), l.Validity())
				rs := l.Nodes()
				for i := range tc.nodes - tc.slow {
					assert.Equal(t, redlock.OutcomeGranted, rs[i].Outcome, "node %d", i)
				}
				for i := tc.nodes - tc.slow; i < tc.nodes; i++ {
					assert.Contains(t, []redlock.Outcome{redlock.OutcomePending, redlock.OutcomeTimedOut}, rs[i].Outcome, "node %d", i)
					assert.Zero(t, rs[i].Latency, "node %d did not answer", i)
				}

				// The slow nodes run the acquire script at 2 s and the
				// release, sent at 1 s, at 3 s: nothing of ours is left.
				time.Sleep(time.Second)
				require.NoError(t, l.Release(ctx))
				time.Sleep(3 * time.Second)
				c.requireGone(t, "report")
			})
		})
	}
}

func TestAcquire_SlowMajorityFailsAtNodeTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []redlock.Option
		timeout time.Duration
	}{
		{"default node timeout", nil, defaultTimeout10s},
		{"WithNodeTimeout", []redlock.Option{redlock.WithNodeTimeout(30 * time.Millisecond)}, 30 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newWarmCluster(t, 3, tc.opts...)
				c.useKey(t, "report") // not its first use: node 0's vote counts
				c.nodes[1].Slow(2 * time.Second)
				c.nodes[2].Slow(2 * time.Second)

				start := time.Now()
				l, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
				elapsed := time.Since(start)
				assert.Nil(t, l)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				assert.ErrorIs(t, err, redlock.ErrNoQuorum, "a majority timed out")
				assert.NotErrorIs(t, err, context.DeadlineExceeded, "the caller's context did not end")
				// One node timeout for the vote, at most one more for the
				// clean-up release on every node: never the 2 s.
				assert.GreaterOrEqual(t, elapsed, tc.timeout)
				assert.LessOrEqual(t, elapsed, 2*tc.timeout)
				qe := quorumError(t, err)
				assert.Equal(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomeTimedOut, redlock.OutcomeTimedOut}, outcomes(qe.Nodes))
				assert.True(t, isTimeout(qe.Nodes[1].Err), "node 1: %v", qe.Nodes[1].Err)
				assert.True(t, isTimeout(qe.Nodes[2].Err), "node 2: %v", qe.Nodes[2].Err)
				assert.Equal(t, 1, qe.Granted)
				assert.False(t, c.nodes[0].Has("report"), "the granting node was released")

				time.Sleep(3 * time.Second)
				c.requireGone(t, "report")
			})
		})
	}
}

// With an even N a 2–2 split must be recognised as a failure as soon as the
// last vote is in, not wait for a timeout.
func TestAcquire_EvenSplitFailsPromptly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 4)
		c.useKey(t, "report") // not its first use: nodes 2 and 3 count
		c.holdElsewhere(t, "report", ttl10s, 0, 1)
		// The refusals come last, so every vote is in when it is decided.
		c.nodes[0].Slow(5 * time.Millisecond)
		c.nodes[1].Slow(5 * time.Millisecond)

		start := time.Now()
		_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
		elapsed := time.Since(start)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		qe := quorumError(t, err)
		assert.Equal(t, 3, qe.Quorum)
		assert.Equal(t, 2, qe.Granted)
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomeTaken, redlock.OutcomeGranted, redlock.OutcomeGranted}, outcomes(qe.Nodes))
		// Decided at 5 ms when the split was known; the clean-up deletes
		// only where our SET may have applied (nodes 2 and 3, fast), not on
		// the slow nodes that answered "taken".
		assert.Equal(t, 5*time.Millisecond, elapsed)

		c.nodes[0].Slow(0)
		c.nodes[1].Slow(0)
		assert.False(t, c.nodes[2].Has("report"))
		assert.False(t, c.nodes[3].Has("report"))
		assert.Equal(t, "someone-else", c.nodes[0].Value("report"))
		assert.Equal(t, "someone-else", c.nodes[1].Value("report"))
	})
}

// Two refusals out of four already make three grants impossible: the vote
// must not wait for the fourth, slow node.
func TestAcquire_EvenSplitDoesNotWaitForStraggler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 4)
		c.holdElsewhere(t, "report", ttl10s, 0, 1)
		c.nodes[3].SlowAcquire(2 * time.Second)

		start := time.Now()
		_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		// Decided at once; Acquire then only waits (at most the node
		// timeout) for its calls to end before returning.
		qe := quorumError(t, err)
		assert.Equal(t, redlock.OutcomePending, qe.Nodes[3].Outcome)
		assert.Less(t, qe.Nodes[2].Latency, defaultTimeout10s)
		assert.Less(t, time.Since(start), 2*defaultTimeout10s)
		synctest.Wait()
		assert.False(t, c.nodes[2].Has("report"))
	})
}

func TestAcquire_EvenSplitTwoNodes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 2)
		assert.Equal(t, 2, c.rl.Quorum(), "two nodes need both")
		c.holdElsewhere(t, "report", ttl10s, 1)
		_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		synctest.Wait()
		assert.False(t, c.nodes[0].Has("report"))
	})
}

func TestAcquire_MajorityUnreachableFails(t *testing.T) {
	for _, tc := range []struct{ nodes, down int }{{1, 1}, {3, 2}, {4, 2}, {5, 3}, {5, 5}} {
		t.Run(fmt.Sprintf("%d of %d down", tc.down, tc.nodes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, tc.nodes)
				for _, nd := range c.nodes[:tc.down] {
					nd.Refuse()
				}
				start := time.Now()
				l, err := c.rl.Acquire(context.Background(), "report", ttl10s,
					redlock.WithRetry(redlock.LinearRetry(10*time.Millisecond, 0, 3)))
				assert.Nil(t, l, "no false success")
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				// Refused dials fail at once: the three attempts take only
				// the two retry delays.
				assert.Equal(t, 20*time.Millisecond, time.Since(start))
				qe := quorumError(t, err)
				assert.Equal(t, 3, qe.Attempts)
				// Decided once a quorum became impossible: later nodes may
				// still be pending.
				unreachable := 0
				for i, r := range qe.Nodes[:tc.down] {
					assert.Contains(t, []redlock.Outcome{redlock.OutcomeUnreachable, redlock.OutcomePending}, r.Outcome, "node %d", i)
					if r.Outcome == redlock.OutcomeUnreachable {
						unreachable++
						assert.ErrorIs(t, r.Err, errRefused, "node %d", i)
					}
				}
				assert.GreaterOrEqual(t, unreachable, tc.nodes-qe.Quorum+1)
				assert.Less(t, qe.Granted, qe.Quorum)
				c.requireGone(t, "report")
			})
		})
	}
}

func TestAcquire_MinorityUnreachableSucceeds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 5)
		c.nodes[1].Refuse()
		c.nodes[3].Refuse()
		l := c.tryAcquire(t, ctx, "report", ttl10s)
		rs := l.Nodes()
		for _, i := range []int{1, 3} {
			assert.Contains(t, []redlock.Outcome{redlock.OutcomeUnreachable, redlock.OutcomePending}, rs[i].Outcome)
		}
		synctest.Wait()
		for _, i := range []int{0, 2, 4} {
			assert.Equal(t, l.Owner(), c.nodes[i].Value("report"))
		}
		c.releaseAndRequireGone(t, ctx, l, "report")
	})
}

// Every outcome a node can report appears, typed, in the *QuorumError.
func TestAcquire_PerNodeOutcomes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 7, noGuard)
		c.holdElsewhere(t, "report", ttl10s, 3)
		c.nodes[4].Refuse()
		c.nodes[5].Slow(2 * time.Second)
		c.nodes[6].Fail("LOADING Redis is loading the dataset in memory")

		_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s,
			redlock.WithOwnerGenerator(func() (string, error) { return "owner-secret-1234", nil }))
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		qe := quorumError(t, err)
		assert.Equal(t, redlock.OpAcquire, qe.Op)
		assert.Equal(t, "report", qe.Key)
		assert.Equal(t, 4, qe.Quorum)
		assert.Equal(t, 3, qe.Granted)
		assert.Equal(t, 1, qe.Attempts)
		assert.Equal(t, redlock.ErrNotAcquired, qe.Err)
		assert.ErrorIs(t, err, redlock.ErrTaken, "4 of 7 nodes answered, one said taken")
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		assert.Equal(t, []redlock.Outcome{
			redlock.OutcomeGranted, redlock.OutcomeGranted, redlock.OutcomeGranted,
			redlock.OutcomeTaken, redlock.OutcomeUnreachable, redlock.OutcomeTimedOut, redlock.OutcomeError,
		}, outcomes(qe.Nodes))
		for i, r := range qe.Nodes {
			assert.Equal(t, c.nodes[i].addr+"/0", r.Node)
		}
		for _, r := range qe.Nodes[:4] {
			assert.NoError(t, r.Err, "a node that answered has no error")
		}
		assert.ErrorIs(t, qe.Nodes[4].Err, errRefused)
		assert.True(t, isTimeout(qe.Nodes[5].Err), "node 5: %v", qe.Nodes[5].Err)
		assert.ErrorContains(t, qe.Nodes[6].Err, "LOADING")

		msg := err.Error()
		for i, want := range []string{"granted", "granted", "granted", "taken", "unreachable", "timed-out", "error"} {
			assert.Contains(t, msg, c.nodes[i].addr+"/0 "+want)
		}
		assert.NotContains(t, msg, "owner-secret-1234", "owner values are secrets")

		synctest.Wait()
		for i := range 3 {
			assert.False(t, c.nodes[i].Has("report"), "node %d", i)
		}
	})
}

// A failed attempt skips its delete on the nodes that answered "taken" only
// when their client never re-sends a command: a re-sent acquire whose first
// copy applied would answer "taken" about our own key. With clients given
// to New that may re-send (go-redis's default MaxRetries), every node gets
// the owner-checked delete, as the Redlock spec has it.
func TestAcquire_FailedAttemptDeletesOnTakenNodesOnlyWithoutResends(t *testing.T) {
	for _, resends := range []bool{false, true} {
		t.Run(fmt.Sprintf("resends=%v", resends), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newWarmCluster(t, 4)
				c.holdElsewhere(t, "report", ttl10s, 0, 1)
				var deletes [4]atomic.Int64
				clients := make([]redis.UniversalClient, 4)
				for i, n := range c.nodes {
					n.SlowIf(0, func(cmd string, args []string) bool {
						if isScript("release", cmd, args) && len(args) > 2 && args[2] == "report" {
							deletes[i].Add(1)
						}
						return false
					})
					o := n.rc.Options()
					o.MaxRetries = -1 // (Options() reports -1 as 0, which NewClient reads as 3)
					if resends {
						o.MaxRetries = 3
					}
					clients[i] = redis.NewClient(o)
					t.Cleanup(func() { _ = clients[i].Close() })
				}
				// Guard off: its quarantined first-use grants would decide the
				// vote before both refusals are in.
				rl, err := redlock.New(clients, redlock.WithLogger(slog.New(slog.DiscardHandler)), noGuard)
				require.NoError(t, err)
				defer rl.Close()
				_, err = rl.TryAcquire(context.Background(), "report", ttl10s)
				require.ErrorIs(t, err, redlock.ErrTaken)
				require.NoError(t, rl.Close())
				want := int64(0)
				if resends {
					want = 1
				}
				for _, i := range []int{0, 1} {
					assert.Equal(t, want, deletes[i].Load(), "deletes sent to taken node %d", i)
				}
				// (A granting node whose reply came after the two refusals
				// decided the vote gets a second delete when it answers.)
				for _, i := range []int{2, 3} {
					assert.Positive(t, deletes[i].Load(), "deletes sent to granting node %d", i)
				}
				assert.Equal(t, "someone-else", c.nodes[0].Value("report"))
			})
		})
	}
}

// A failed attempt's key is deleted on a node whose client re-sends
// commands even when that node's "taken" reply comes after the vote was
// decided: the first copy of the SET applied after the clean-up's delete
// ran there, and the re-sent copy found our own key. With the guard on,
// the epoch that first copy created is voided, so the key is not
// quarantined either.
func TestAcquire_LateTakenFromAResendingNodeIsUndone(t *testing.T) {
	for _, guard := range []bool{false, true} {
		t.Run(fmt.Sprintf("guard=%v", guard), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var opts []redlock.Option
				if guard {
					opts = append(opts, redlock.WithQuarantine(time.Minute))
				} else {
					opts = append(opts, redlock.WithoutAmnesiaGuard())
				}
				c := newWarmCluster(t, 3)
				c.holdElsewhere(t, "report", time.Second, 0, 2)
				clients := make([]redis.UniversalClient, 3)
				for i, n := range c.nodes {
					o := n.rc.Options()
					o.MaxRetries = -1
					if i == 1 {
						o.MaxRetries = 3 // may re-send
					}
					clients[i] = redis.NewClient(o)
					t.Cleanup(func() { _ = clients[i].Close() })
				}
				// Node 1's reply comes after the refusals of nodes 0 and 2
				// decided the vote, within the per-node timeout.
				clients[1].(*redis.Client).AddHook(&resendHook{key: "report", d: 50 * time.Millisecond})
				rl, err := redlock.New(clients, append(opts, redlock.WithLogger(slog.New(slog.DiscardHandler)))...)
				require.NoError(t, err)
				defer rl.Close()
				_, err = rl.TryAcquire(context.Background(), "report", ttl10s)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				assert.Equal(t, redlock.OutcomePending, quorumError(t, err).Nodes[1].Outcome, "node 1 must answer after the decision")
				time.Sleep(time.Second)
				synctest.Wait() // node 1's late reply and what it sends
				assert.False(t, c.nodes[1].Has("report"), "the failed attempt's key is left on node 1")
				if guard {
					assert.Equal(t, "1", c.nodes[1].m.HGet("{report}:epoch", "void"), "node 1's epoch is left unvouched")
				}
				require.NoError(t, rl.Close())
			})
		})
	}
}

// Failed attempts leave no key behind, also on nodes whose client re-sends
// a command whose reply was lost (New with MaxRetries > 0), where a grant
// can answer "taken" about our own key, in time or after the vote. Property,
// over generated schedules on N = 3 or 5 nodes, guard on or off: a minority
// of the nodes down, up to three clients racing for one key in each of a
// few rounds, each node's acquire calls delayed by 0 to 50 ms (within the
// per-node timeout) and their first replies lost or not; once every call
// has finished, no node holds the key.
func TestAcquire_FailedAttemptsWithResendsLeaveNoKey(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			ctx := context.Background()
			n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
			opts := []redlock.Option{redlock.WithLogger(slog.New(slog.DiscardHandler))}
			if rapid.Bool().Draw(rt, "guard") {
				opts = append(opts, redlock.WithQuarantine(time.Minute))
			} else {
				opts = append(opts, redlock.WithoutAmnesiaGuard())
			}
			c := newWarmCluster(rt, n)
			var rcs []*redis.Client
			rt.Cleanup(func() { // runs last
				for _, rc := range rcs {
					_ = rc.Close()
				}
				for _, nd := range c.nodes {
					_ = nd.rc.Close() // ends go-redis's re-dial loops
				}
				time.Sleep(2 * time.Second)
			})
			hooks := make([]*lossHook, n)
			for i := range hooks {
				hooks[i] = &lossHook{key: "report"}
			}
			var clients []*redlock.Client
			for range 3 {
				nodes := make([]redis.UniversalClient, n)
				for i, nd := range c.nodes {
					o := nd.rc.Options()
					o.MaxRetries = 3 // may re-send
					rc := redis.NewClient(o)
					rc.AddHook(hooks[i])
					rcs = append(rcs, rc)
					nodes[i] = rc
				}
				rl, err := redlock.New(nodes, opts...)
				require.NoError(rt, err)
				rt.Cleanup(func() { _ = rl.Close() })
				clients = append(clients, rl)
			}
			down := rapid.IntRange(0, (n-1)/2).Draw(rt, "down")
			for _, i := range rapid.Permutation(seq(n)).Draw(rt, "order")[:down] {
				c.nodes[i].Refuse()
			}
			delays := []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 50 * time.Millisecond}
			for round := range rapid.IntRange(1, 4).Draw(rt, "rounds") {
				for i, h := range hooks {
					h.set(rapid.SampledFrom(delays).Draw(rt, fmt.Sprintf("round %d node %d delay", round, i)),
						rapid.Bool().Draw(rt, fmt.Sprintf("round %d node %d loses a reply", round, i)))
				}
				var wg sync.WaitGroup
				for _, rl := range clients[:rapid.IntRange(1, 3).Draw(rt, fmt.Sprintf("round %d clients", round))] {
					wg.Go(func() {
						if l, err := rl.TryAcquire(ctx, "report", ttl10s); err == nil {
							_ = l.Release(ctx)
						}
					})
				}
				wg.Wait()
			}
			for _, h := range hooks {
				h.set(0, false)
			}
			time.Sleep(time.Second)
			synctest.Wait() // every late reply and clean-up
			for i, nd := range c.nodes {
				assert.False(rt, nd.Has("report"), "node %d holds a key of a finished attempt: %q", i, nd.Value("report"))
			}
		})
	})
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

// resendHook models a node client that re-sends a command whose reply was
// lost (go-redis with MaxRetries > 0, after a read timeout or a broken
// connection): the first acquire call for the key waits d, runs, and is run
// again, and the caller gets the second reply. The second SET NX finds the
// key the first one set: "taken", about our own key.
type resendHook struct {
	key  string
	d    time.Duration
	done atomic.Bool
}

func (h *resendHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *resendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *resendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || args[0] != "evalsha" || args[1] != redlock.ScriptHashes["acquire"] || args[3] != h.key || h.done.Swap(true) {
			return next(ctx, cmd)
		}
		time.Sleep(h.d)
		_ = next(ctx, cmd) // its reply is lost
		return next(ctx, cmd)
	}
}

// lossHook is resendHook for a property: while lose is set, every acquire
// call for key waits d, runs, and runs again (the first reply lost); d
// alone delays it.
type lossHook struct {
	key  string
	mu   sync.Mutex
	d    time.Duration
	lose bool
}

func (h *lossHook) set(d time.Duration, lose bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.d, h.lose = d, lose
}

func (h *lossHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lossHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *lossHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) < 4 || args[0] != "evalsha" || args[1] != redlock.ScriptHashes["acquire"] || args[3] != h.key {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		d, lose := h.d, h.lose
		h.mu.Unlock()
		time.Sleep(d)
		if lose {
			_ = next(ctx, cmd) // its reply is lost
		}
		return next(ctx, cmd)
	}
}
