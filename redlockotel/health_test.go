package redlockotel_test

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

// stateKey is the data point key of node's redlock.node.state gauge for
// state.
func stateKey(node int, state string) string {
	return fmt.Sprintf("redlock.node.state{db.namespace=0,redlock.node.state=%s,server.address=127.0.0.1,server.port=%d}", state, 7001+node)
}

// RegisterHealth reports each node's state in the Client's health view:
// 1 for its state, 0 for the others, and no quarantine left.
func TestObserver_RegisterHealthGauges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 3, nil)
		h.nodes[2].Refuse()
		obs := h.observer
		reg, err := obs.RegisterHealth(h.rl)
		require.NoError(t, err)
		m := h.metrics(t)
		for i := range 3 {
			assert.Equal(t, "1", m[stateKey(i, "unknown")], "node %d before any call", i)
		}
		l, err := h.rl.Acquire(context.Background(), "job", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Release(context.Background()))
		synctest.Wait()

		m = h.metrics(t)
		for i, want := range []string{"up", "up", "down"} {
			for _, s := range []string{"unknown", "up", "down", "quarantined"} {
				v := "0"
				if s == want {
					v = "1"
				}
				assert.Equal(t, v, m[stateKey(i, s)], "node %d state %s", i, s)
			}
			assert.Equal(t, "0", m[fmt.Sprintf("redlock.node.quarantine.left{db.namespace=0,server.address=127.0.0.1,server.port=%d}", 7001+i)])
		}

		require.NoError(t, reg.Unregister())
		assert.NotContains(t, h.metrics(t), stateKey(0, "up"), "unregistered")
		_, err = obs.RegisterHealth(nil)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
	})
}
