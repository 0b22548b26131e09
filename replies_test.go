package redlock_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// Extend and Release say why they failed when a majority of the nodes
// answer an error no retry can fix; Acquire fails at once on each such
// reply of the table, and retries the transient ones.
func TestMisconfigured_EveryOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, noGuard)
		ctx := context.Background()
		l := c.acquire(t, ctx, "report", 10*time.Second)
		for _, n := range c.nodes {
			n.Fail("NOPERM this user has no permissions to run the 'evalsha' command")
		}
		_, err := l.Extend(ctx, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		require.ErrorIs(t, err, redlock.ErrMisconfigured)
		assert.Contains(t, err.Error(), "denies the ACL user a command or key the lock needs")
		err = l.Release(ctx)
		require.ErrorIs(t, err, redlock.ErrMisconfigured)
		synctest.Wait()
	})
	for reply, unfixable := range map[string]bool{
		"NOAUTH Authentication required.":                        true,
		"ERR Protocol error: unauthenticated multibulk length":   true,
		"WRONGPASS invalid username-password pair":               true,
		"READONLY You can't write against a read only replica":   true,
		"MOVED 4432 127.0.0.1:7002":                              true,
		"ASK 4432 127.0.0.1:7002":                                true,
		"CROSSSLOT Keys in request don't hash to the same slot":  true,
		"ERR unknown command 'evalsha'":                          true,
		"ERR The user executing the script can't run":            true,
		"LOADING Redis is loading the dataset in memory":         false,
		"BUSY Redis is busy running a script":                    false,
		"MASTERDOWN Link with MASTER is down":                    false,
		"TRYAGAIN Multiple keys request during rehashing":        false,
		"OOM command not allowed when used memory > 'maxmemory'": false,
	} {
		t.Run(reply, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, 3, noGuard)
				for _, n := range c.nodes {
					n.Fail(reply)
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				_, err := c.rl.Acquire(ctx, "report", 10*time.Second)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				assert.Equal(t, unfixable, errors.Is(err, redlock.ErrMisconfigured), "%v", err)
				if unfixable {
					assert.Equal(t, 1, quorumError(t, err).Attempts)
				} else {
					assert.Greater(t, quorumError(t, err).Attempts, 1, "retried")
				}
				synctest.Wait()
			})
		})
	}
}

// A minority of nodes answering what no retry fixes leaves a quorum that
// may still grant: Acquire keeps retrying while the key is taken elsewhere,
// and takes it once it is free. Only when fewer than a quorum are left does
// the call fail at once.
func TestMisconfigured_MinorityIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, noGuard)
		ctx := context.Background()
		holder := c.acquireSettled(t, ctx, "report", 10*time.Second)
		c.nodes[2].Fail("NOPERM this user has no permissions to run the 'evalsha' command")
		retry := redlock.WithRetry(redlock.LinearRetry(10*time.Millisecond, 0, 3))
		_, err := c.rl.Acquire(ctx, "report", 10*time.Second, retry)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NotErrorIs(t, err, redlock.ErrMisconfigured, "two of three nodes can still grant: %v", err)
		assert.Greater(t, quorumError(t, err).Attempts, 1, "retried while the key is taken")

		require.NoError(t, holder.Release(ctx))
		l, err := c.rl.Acquire(ctx, "report", 10*time.Second, retry)
		require.NoError(t, err, "a quorum of the nodes grants despite the misconfigured one")
		require.NoError(t, l.Release(ctx))
		synctest.Wait()
	})
}
