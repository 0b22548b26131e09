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
// written back), and Release waits for that work: nothing the lock started
// outlives Release. The acquisition hands its running node calls to the
// Lock without a goroutine per batch, so this is what checks the hand-over.
func TestRelease_WaitsForAcquisitionStragglers(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		c.warmUp(t)
		// Node 2 answers the acquisition late, with a counter far below the
		// others' (clock-seeded), and writes the token back slowly.
		require.NoError(t, c.nodes[2].m.Set("{job}:fence", "5"))
		c.nodes[2].SlowIf(50*time.Millisecond, func(cmd string, args []string) bool {
			return isScript("acquire", cmd, args) || isScript("fence", cmd, args)
		})
		base := goleak.IgnoreCurrent()
		start := time.Now()
		l, err := c.rl.TryAcquire(ctx, "job", ttl10s)
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "Acquire returns at its quorum")
		// The grant arrives at 50 ms; its write-back runs until 100 ms (and
		// finds the key deleted by then: the owner check leaves the counter).
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, l.Release(ctx))
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "Release waits for the straggler's write-back")
		lc.verifyNone(t, base)
	})
}
