package redlock_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// A counter a node lost is re-created above the token of a holder whose
// Acquire returned before the re-creating attempt began, however soon
// after (docs/fencing.md, assumption C): on clocks that agree, a restart
// of one millisecond is enough. On 3 nodes without the guard, A's calls
// reach nodes 1 and 2 late (a loaded machine): up to 25 ms late they take
// A's proposal, later they seed from their own clocks. Then nodes 1 and 2
// lose their data, and B, starting a millisecond after A returned, is
// granted there, its own calls late or not. B's token must be above A's
// whichever way each counter was seeded. (When proposals were the client's
// clock 25 ms back, a counter re-created from one was below A's token
// seeded from a node's clock: the amnesia-unguarded chaos scenario saw its
// tokens out of holder order.)
func TestFencing_CounterRecreatedRightAfterAHolderIsAboveItsToken(t *testing.T) {
	late := []time.Duration{0, 20 * time.Millisecond, 30 * time.Millisecond, 60 * time.Millisecond}
	for _, lateA := range late {
		for _, lateB := range late {
			t.Run(fmt.Sprintf("A %v late, B %v late", lateA, lateB), func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ctx := context.Background()
					c := newWarmCluster(t, 3, noGuard)
					b := c.secondClient(t, noGuard)
					c.nodes[1].SlowAcquire(lateA)
					c.nodes[2].SlowAcquire(lateA)
					a, err := c.rl.TryAcquire(ctx, "report", ttl10s)
					require.NoError(t, err)
					synctest.Wait() // the stragglers' follow-ups

					time.Sleep(time.Millisecond) // nodes 1 and 2 restart empty
					c.nodes[1].m.FlushAll()
					c.nodes[2].m.FlushAll()
					c.nodes[1].SlowAcquire(lateB)
					c.nodes[2].SlowAcquire(lateB)
					l, err := b.TryAcquire(ctx, "report", ttl10s)
					require.NoError(t, err, "nodes 1 and 2 forgot A's key")
					assert.Equal(t, []redlock.Outcome{redlock.OutcomeGranted, redlock.OutcomeGranted}, outcomes(l.Nodes())[1:])
					assert.Greater(t, l.Token(), a.Token(), "B's token, from counters re-created after A returned")
				})
			})
		}
	}
}
