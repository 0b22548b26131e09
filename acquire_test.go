package redlock_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// A straggler of the acquisition whose grant arrives after Acquire returned
// still has work on its node (its counter is below the token: the token is
// written back). Release does not wait for it (it returns at its majority);
// the Client tracks it, so Close does: nothing a lock started outlives Close.
func TestClose_WaitsForAcquisitionStragglers(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newWarmCluster(t, 3, noGuard)
		// Node 2 answers the acquisition late, with a counter far below the
		// others' (clock-seeded), and writes the token back slowly.
		require.NoError(t, c.nodes[2].m.Set("{job}:fence", "5"))
		c.nodes[2].SlowScripts(50*time.Millisecond, "acquire", "fence")
		base := goleak.IgnoreCurrent()
		start := time.Now()
		l := c.tryAcquire(t, ctx, "job", ttl10s)
		assert.Zero(t, time.Since(start), "Acquire returns at its quorum")
		// The grant arrives at 50 ms; its write-back runs until 100 ms (and
		// finds the key deleted by then: the owner check leaves the counter).
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, 60*time.Millisecond, time.Since(start), "Release returns at its majority")
		require.NoError(t, c.rl.Close())
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "Close waits for the straggler's write-back")
		lc.verifyNone(t, base)
	})
}
