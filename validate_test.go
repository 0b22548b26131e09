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
		opts []redlock.Option
		want string // "" for nil, else a part of the message
	}{
		{"the defaults", 30 * time.Second, nil, ""},
		{"shortest with the defaults", 105 * time.Millisecond, nil, ""},
		{"below the defaults' shortest", 104 * time.Millisecond, nil, "the smallest usable ttl with this drift factor and per-node timeout is 105ms"},
		{"zero", 0, nil, "below Redis's 1 ms expiry precision"},
		{"negative", -time.Second, nil, "below Redis's 1 ms expiry precision"},
		{"not whole milliseconds", 1500 * time.Microsecond, nil, "not a whole number of milliseconds"},
		{"drift leaves nothing", 2 * time.Millisecond, []redlock.Option{redlock.WithNodeTimeout(time.Microsecond)}, "leaves no validity"},
		{"shorter per-node timeout", 5 * time.Millisecond, []redlock.Option{redlock.WithNodeTimeout(time.Millisecond)}, ""},
		{"longer than the retention", 2 * time.Hour, []redlock.Option{redlock.WithRetention(time.Hour)}, "longer than the retention"},
		{"quarantine beyond the retention", time.Second, []redlock.Option{redlock.WithQuarantine(2 * time.Hour), redlock.WithRetention(time.Hour)}, "shorter than the quarantine"},
		{"interval at the validity", time.Second, []redlock.Option{redlock.WithExtendInterval(988 * time.Millisecond)}, "extension interval 988ms must be below the lock's validity 988ms"},
		{"interval below the validity", time.Second, []redlock.Option{redlock.WithExtendInterval(987 * time.Millisecond)}, ""},
		{"bad option", time.Second, []redlock.Option{redlock.WithDriftFactor(1)}, "drift factor 1 must be in [0, 1)"},
		{"nil option", time.Second, []redlock.Option{nil}, "nil option"},
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
		var hold []redlock.Option
		if rapid.Bool().Draw(rt, "interval") {
			hold = append(hold, redlock.WithExtendInterval(time.Duration(rapid.IntRange(1, 3000).Draw(rt, "interval_ms"))*time.Millisecond))
		}
		rapid.SyncTest(rt, func(rt *rapid.T) {
			c := newCluster(rt, 3)
			ctx := context.Background()
			want := redlock.CheckTTL(ttl, append(opts, hold...)...)
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
		require.NoError(t, l.Release(ctx))
	})

	bubble("one node says taken, the others unreachable", func(t *testing.T, c *cluster) {
		require.NoError(t, c.nodes[0].m.Set("one", "another-owner"))
		c.nodes[1].Refuse()
		c.nodes[2].Slow(time.Second) // still pending when the vote is lost
		_, err := c.rl.TryAcquire(ctx, "one", time.Second)
		assert.ErrorIs(t, err, redlock.ErrTaken, "any node is enough")
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		assert.Equal(t, []redlock.Outcome{redlock.OutcomeTaken, redlock.OutcomeUnreachable, redlock.OutcomePending},
			[]redlock.Outcome{qe.Nodes[0].Outcome, qe.Nodes[1].Outcome, qe.Nodes[2].Outcome})
	})

	bubble("only unreachable nodes", func(t *testing.T, c *cluster) {
		c.nodes[1].Refuse()
		c.nodes[2].Refuse()
		_, err := c.rl.TryAcquire(ctx, "free", time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.NotErrorIs(t, err, redlock.ErrTaken)
	})

	bubble("a wait that ends on a held lock", func(t *testing.T, c *cluster) {
		l := c.tryAcquire(t, ctx, "wait", time.Minute)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := c.rl.Acquire(wctx, "wait", time.Second)
		assert.ErrorIs(t, err, redlock.ErrTaken)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
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
	})
}
