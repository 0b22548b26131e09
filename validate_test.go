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
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

func TestCheckTTL_Rules(t *testing.T) {
	for _, tc := range []struct {
		name string
		ttl  time.Duration
		opts []redlock.DoOption
		want string // "" for nil, else a part of the message
	}{
		{"the defaults", 30 * time.Second, nil, ""},
		{"shortest with the defaults", 105 * time.Millisecond, nil, ""},
		{"below the defaults' shortest", 104 * time.Millisecond, nil, "the smallest usable ttl with this drift factor and per-node timeout is 105ms"},
		{"zero", 0, nil, "below Redis's 1 ms expiry precision"},
		{"negative", -time.Second, nil, "below Redis's 1 ms expiry precision"},
		{"not whole milliseconds", 1500 * time.Microsecond, nil, "not a whole number of milliseconds"},
		{"drift leaves nothing", 2 * time.Millisecond, []redlock.DoOption{redlock.WithNodeTimeout(time.Microsecond)}, "leaves no validity"},
		{"shorter per-node timeout", 5 * time.Millisecond, []redlock.DoOption{redlock.WithNodeTimeout(time.Millisecond)}, ""},
		{"longer than the retention", 2 * time.Hour, []redlock.DoOption{redlock.WithRetention(time.Hour)}, "longer than the retention"},
		{"quarantine beyond the retention", time.Second, []redlock.DoOption{redlock.WithQuarantine(2 * time.Hour), redlock.WithRetention(time.Hour)}, "shorter than the quarantine"},
		{"interval at the validity", time.Second, []redlock.DoOption{redlock.WithExtendInterval(988 * time.Millisecond)}, "extension interval 988ms must be below the lock's validity 988ms"},
		{"interval below the validity", time.Second, []redlock.DoOption{redlock.WithExtendInterval(987 * time.Millisecond)}, ""},
		{"bad option", time.Second, []redlock.DoOption{redlock.WithDriftFactor(1)}, "drift factor 1 must be in [0, 1)"},
		{"nil Option", time.Second, []redlock.DoOption{redlock.Option(nil)}, "nil option"},
		{"nil HoldOption", time.Second, []redlock.DoOption{redlock.HoldOption(nil)}, "nil option"},
		{"nil DoOption", time.Second, []redlock.DoOption{nil}, "nil option"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := redlock.CheckTTL(tc.ttl, tc.opts...)
			if tc.want == "" {
				assert.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// CheckTTL promises the error Acquire, then KeepAlive, would return: for
// random TTLs and options, it refuses exactly what they refuse, with the
// same message, and what it accepts is acquired and kept alive.
func TestCheckTTL_AgreesWithAcquireAndKeepAlive(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		ttl := time.Duration(rapid.Int64Range(-1, 3000).Draw(rt, "ttl_ms")) * time.Millisecond
		if rapid.Bool().Draw(rt, "fraction") {
			ttl += time.Duration(rapid.Int64Range(1, 999).Draw(rt, "µs")) * time.Microsecond
		}
		var opts []redlock.Option
		if rapid.Bool().Draw(rt, "drift") {
			opts = append(opts, redlock.WithDriftFactor(float64(rapid.IntRange(0, 60).Draw(rt, "drift_pct"))/100))
		}
		if rapid.Bool().Draw(rt, "node timeout") {
			opts = append(opts, redlock.WithNodeTimeout(time.Duration(rapid.IntRange(1, 1500).Draw(rt, "timeout_ms"))*time.Millisecond))
		}
		if rapid.Bool().Draw(rt, "retention") {
			opts = append(opts, redlock.WithRetention(time.Duration(rapid.IntRange(1, 3000).Draw(rt, "retention_ms"))*time.Millisecond))
		}
		if rapid.Bool().Draw(rt, "quarantine") {
			opts = append(opts, redlock.WithQuarantine(time.Duration(rapid.IntRange(0, 3000).Draw(rt, "quarantine_ms"))*time.Millisecond))
		}
		var hold []redlock.HoldOption
		if rapid.Bool().Draw(rt, "interval") {
			hold = append(hold, redlock.WithExtendInterval(time.Duration(rapid.IntRange(1, 3000).Draw(rt, "interval_ms"))*time.Millisecond))
		}
		rapid.SyncTest(rt, func(rt *rapid.T) {
			c := newCluster(rt, 3)
			ctx := context.Background()
			want := redlock.CheckTTL(ttl, doOptions(opts, hold...)...)
			lock, err := c.rl.TryAcquire(ctx, "k", ttl, opts...)
			if errors.Is(err, redlock.ErrInvalidArgument) {
				require.Error(rt, want, "Acquire refused %v: %v", ttl, err)
				require.Equal(rt, err.Error(), want.Error())
				return
			}
			// Fake time stands still while the nodes answer: a TTL that
			// passes the checks leaves validity.
			require.NoError(rt, err)
			lease, err := lock.KeepAlive(ctx, hold...)
			if err != nil {
				require.ErrorIs(rt, err, redlock.ErrInvalidArgument)
				require.Error(rt, want, "KeepAlive refused %v: %v", ttl, err)
				require.Equal(rt, err.Error(), want.Error())
				require.NoError(rt, lock.Release(ctx))
				return
			}
			require.NoError(rt, want, "Acquire and KeepAlive accepted %v", ttl)
			require.NoError(rt, lease.Release(ctx))
		})
	})
}

// ErrTaken says "busy" only when the nodes that answered could decide the
// vote; ErrNoQuorum says that too few answered for that, whatever the
// survivors said.
func TestErrTaken(t *testing.T) {
	// Each case in a bubble of its own, over three fresh nodes.
	bubble := func(name string, f func(t *testing.T, c *cluster)) {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, newCluster(t, 3)) })
		})
	}
	ctx := context.Background()

	bubble("held on every node", func(t *testing.T, c *cluster) {
		l := c.tryAcquire(t, ctx, "held", time.Second)
		_, err := c.rl.TryAcquire(ctx, "held", time.Second)
		assert.ErrorIs(t, err, redlock.ErrTaken)
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		require.NoError(t, l.Release(ctx))
	})

	bubble("one node says taken, one is unreachable, one answers later", func(t *testing.T, c *cluster) {
		c.warmUp(t) // the scripts are loaded: one round trip each
		require.NoError(t, c.nodes[0].m.Set("one", "another-owner"))
		c.nodes[1].Refuse()
		c.nodes[2].Slow(50 * time.Millisecond) // within the per-node timeout, 100 ms
		_, err := c.rl.TryAcquire(ctx, "one", time.Second)
		assert.ErrorIs(t, err, redlock.ErrTaken, "a majority answered, one of them taken")
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		// The vote waited for node 2 to tell busy from an outage. Node 2
		// created the key's epoch, and node 0 showed history: quarantined.
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomeUnreachable, redlock.OutcomeQuarantined},
			outcomes(quorumError(t, err).Nodes))
		c.endRedials(1)
	})

	bubble("one node says taken, the others unreachable or timed out", func(t *testing.T, c *cluster) {
		require.NoError(t, c.nodes[0].m.Set("one", "another-owner"))
		c.nodes[1].Refuse()
		c.nodes[2].Slow(time.Second)
		_, err := c.rl.TryAcquire(ctx, "one", time.Second)
		assert.ErrorIs(t, err, redlock.ErrNoQuorum, "no majority answered")
		assert.NotErrorIs(t, err, redlock.ErrTaken, "one survivor's taken does not make the lock busy")
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomeUnreachable, redlock.OutcomeTimedOut},
			outcomes(quorumError(t, err).Nodes))
		assert.ErrorContains(t, err, "too few answered")
		c.endRedials(1)
	})

	bubble("only unreachable nodes", func(t *testing.T, c *cluster) {
		c.nodes[1].Refuse()
		c.nodes[2].Refuse()
		_, err := c.rl.TryAcquire(ctx, "free", time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.ErrorIs(t, err, redlock.ErrNoQuorum)
		assert.NotErrorIs(t, err, redlock.ErrTaken)
		c.endRedials(1, 2)
	})

	bubble("a wait that ends on a held lock", func(t *testing.T, c *cluster) {
		l := c.tryAcquire(t, ctx, "wait", time.Minute)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.rl.Acquire(wctx, "wait", time.Second)
		assert.ErrorIs(t, err, redlock.ErrTaken)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		assert.NotErrorIs(t, err, redlock.ErrNoQuorum)
		require.NoError(t, l.Release(ctx))
	})

	t.Run("not for other errors", func(t *testing.T) {
		taken := []redlock.NodeResult{{Outcome: redlock.OutcomeTaken}}
		assert.NotErrorIs(t, &redlock.QuorumError{Op: redlock.OpExtend, Err: redlock.ErrNotHeld, Nodes: taken}, redlock.ErrTaken, "an extension is not an acquisition")
		assert.NotErrorIs(t, redlock.ErrNotAcquired, redlock.ErrTaken)
		assert.NotErrorIs(t, redlock.ErrTaken, redlock.ErrNotAcquired)
		wrapped := fmt.Errorf("job: %w", &redlock.QuorumError{Op: redlock.OpAcquire, Err: redlock.ErrNotAcquired, Nodes: taken})
		assert.ErrorIs(t, wrapped, redlock.ErrTaken, "through a wrapper")
		assert.ErrorIs(t, wrapped, redlock.ErrNotAcquired)
		assert.NotErrorIs(t, wrapped, redlock.ErrNoQuorum)
		down := &redlock.QuorumError{Op: redlock.OpAcquire, Err: redlock.ErrNotAcquired, Quorum: 2, Nodes: []redlock.NodeResult{
			{Outcome: redlock.OutcomeTaken}, {Outcome: redlock.OutcomeError}, {Outcome: redlock.OutcomeTimedOut}}}
		assert.ErrorIs(t, fmt.Errorf("job: %w", down), redlock.ErrNoQuorum, "through a wrapper")
		assert.NotErrorIs(t, down, redlock.ErrTaken)
		cut := &redlock.QuorumError{Op: redlock.OpAcquire, Err: redlock.ErrNotAcquired, Quorum: 2, Nodes: []redlock.NodeResult{
			{Outcome: redlock.OutcomeTaken}, {Outcome: redlock.OutcomeUnreachable}, {Outcome: redlock.OutcomeCanceled}}}
		assert.NotErrorIs(t, cut, redlock.ErrNoQuorum, "a node the caller's context cut short did not fail")
		assert.NotErrorIs(t, &redlock.QuorumError{Op: redlock.OpExtend, Err: redlock.ErrNotHeld, Quorum: 2,
			Nodes: []redlock.NodeResult{{Outcome: redlock.OutcomeUnreachable}, {Outcome: redlock.OutcomeUnreachable}}}, redlock.ErrNoQuorum,
			"an extension says so with its own sentinel")
	})
}

// A majority of the nodes down, and the survivors hold the key: a rival's
// attempt met "taken" answers, but no majority answered, so it reports the
// outage (ErrNoQuorum), not a busy lock (ErrTaken). The killed nodes either
// refuse connections at once (the survivors' answers may still be pending
// when the vote is decided) or time out (the survivors have answered by
// then).
func TestAcquire_MajorityDownIsNoQuorumNotTaken(t *testing.T) {
	for _, kill := range []string{"refused", "timed out"} {
		t.Run(kill, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newCluster(t, 5)
				holder := c.acquireSettled(t, ctx, "report", ttl10s)
				for _, i := range []int{0, 1, 2} {
					if kill == "refused" {
						c.nodes[i].Refuse()
					} else {
						c.nodes[i].Slow(2 * time.Second)
					}
				}
				rival := c.secondClient(t)
				_, err := rival.TryAcquire(ctx, "report", ttl10s)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				assert.ErrorIs(t, err, redlock.ErrNoQuorum)
				assert.NotErrorIs(t, err, redlock.ErrTaken, "the survivors' taken must not hide the outage")
				got := outcomes(quorumError(t, err).Nodes)
				survivors := []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomeTaken}
				if kill == "refused" {
					assert.Equal(t, []redlock.Outcome{redlock.OutcomeUnreachable, redlock.OutcomeUnreachable, redlock.OutcomeUnreachable}, got[:3])
					for i, o := range got[3:] {
						assert.Contains(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomePending}, o, "node %d", 3+i)
					}
					c.endRedials(0, 1, 2)
				} else {
					assert.Equal(t, append([]redlock.Outcome{redlock.OutcomeTimedOut, redlock.OutcomeTimedOut, redlock.OutcomeTimedOut}, survivors...), got)
				}
				assert.Positive(t, holder.Validity())
			})
		})
	}
}
