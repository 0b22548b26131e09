package redlock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// TestDial_ReleaseBoundedBehindAFullQueue: every node's only connection is
// taken by another key's acquire call that waits 8 s for its reply, so the
// release's deletes can only queue behind it. Release returns within about
// one per-node timeout all the same, with the queued nodes reported pending
// (an error wrapping ErrNoQuorum: no node confirmed the delete yet); the
// deletes go on in the background once the connections come free, so no
// key is left.
func TestDial_ReleaseBoundedBehindAFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 50 * time.Millisecond
		nodes, rl := dialCluster(t, 3, 1, redlock.WithNodeTimeout(timeout))
		ctx := context.Background()
		l, err := rl.TryAcquire(ctx, "held", 20*time.Second)
		require.NoError(t, err)

		for _, n := range nodes {
			n.SlowIf(8*time.Second, func(cmd string, args []string) bool {
				return (cmd == "EVALSHA" || cmd == "EVAL") && slices.ContainsFunc(args, func(a string) bool { return strings.Contains(a, "busy") })
			})
		}
		busy := make(chan error, 1)
		go func() {
			_, err := rl.TryAcquire(ctx, "busy", 20*time.Second)
			busy <- err
		}()
		synctest.Wait() // every node's connection now waits for the busy call's reply

		start := time.Now()
		err = l.Release(ctx)
		took := time.Since(start)
		assert.LessOrEqual(t, took, 2*timeout, "Release waited behind the full queues")
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		var qe *redlock.QuorumError
		require.True(t, errors.As(err, &qe))
		for i, r := range qe.Nodes {
			assert.Equal(t, redlock.OutcomePending, r.Outcome, "node %d: a delete still queued is pending", i)
		}
		for i, n := range nodes {
			assert.True(t, n.Has("held"), "node %d: the delete cannot have run yet", i)
		}
		<-busy // it fails: its calls time out (and linger until their replies come)
		// Once the busy calls' replies came (8 s), the queued deletes ran.
		time.Sleep(9 * time.Second)
		synctest.Wait()
		for i, n := range nodes {
			assert.False(t, n.Has("held"), "node %d still holds the released key once its queue emptied", i)
		}
		require.NoError(t, rl.Close())
	})
}
