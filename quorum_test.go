package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The Redlock spec decides an attempt as soon as a majority granted it; a
// library that waits for every node after that lets one slow node slow down
// every acquisition.
func TestAcquire_SlowMinorityDoesNotDelay(t *testing.T) {
	for _, tc := range []struct{ nodes, slow int }{{3, 1}, {5, 2}, {7, 3}} {
		t.Run(fmt.Sprintf("%d of %d nodes slow", tc.slow, tc.nodes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newWarmCluster(t, tc.nodes)
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
				c.nodes[1].Slow(2 * time.Second)
				c.nodes[2].Slow(2 * time.Second)

				start := time.Now()
				l, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
				elapsed := time.Since(start)
				assert.Nil(t, l)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
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
		c := newCluster(t, 7)
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

func TestOutcome_String(t *testing.T) {
	for o, want := range map[redlock.Outcome]string{
		redlock.OutcomePending:     "pending",
		redlock.OutcomeGranted:     "granted",
		redlock.OutcomeTaken:       "taken",
		redlock.OutcomeNotHeld:     "not-held",
		redlock.OutcomeUnreachable: "unreachable",
		redlock.OutcomeTimedOut:    "timed-out",
		redlock.OutcomeCanceled:    "canceled",
		redlock.OutcomeError:       "error",
		redlock.Outcome(-1):        "unknown",
		redlock.Outcome(99):        "unknown",
	} {
		assert.Equal(t, want, o.String())
	}
}

func TestQuorumError_Unwrap(t *testing.T) {
	qe := &redlock.QuorumError{Op: "acquire", Key: "k", Quorum: 2, Err: redlock.ErrNotAcquired, Cause: context.Canceled}
	assert.ErrorIs(t, qe, redlock.ErrNotAcquired)
	assert.ErrorIs(t, qe, context.Canceled)
	assert.NotErrorIs(t, qe, redlock.ErrNotHeld)

	qe = &redlock.QuorumError{Op: "release", Key: "k", Quorum: 2, Err: redlock.ErrNotHeld}
	assert.ErrorIs(t, qe, redlock.ErrNotHeld)
	assert.NotErrorIs(t, qe, context.Canceled)
	wrapped := fmt.Errorf("report job: %w", qe)
	var got *redlock.QuorumError
	require.True(t, errors.As(wrapped, &got))
	assert.Same(t, qe, got)
}
