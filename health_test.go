package redlock_test

import (
	"context"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// A node that dies is logged down once, however many calls fail on it, and
// once when it answers again; Health reports it meanwhile.
func TestHealth_OneLogLinePerChange(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logger, logs := logBuffer()
		c := newCluster(t, 3, redlock.WithLogger(logger), noGuard)
		ctx := context.Background()
		for _, h := range c.rl.Health() {
			assert.Equal(t, redlock.HealthUnknown, h.State, "no call yet")
		}
		cycle := func(n int) {
			for range n {
				l := c.acquire(t, ctx, "report", 10*time.Second)
				require.NoError(t, l.Release(ctx))
				synctest.Wait() // the stragglers' calls end
			}
		}
		cycle(2)
		for _, h := range c.rl.Health() {
			assert.Equal(t, redlock.HealthUp, h.State)
			assert.False(t, h.LastAnswer.IsZero())
		}

		diedAt := time.Now()
		c.nodes[2].Refuse()
		cycle(20) // a majority still grants
		h := c.rl.Health()
		assert.Equal(t, redlock.HealthUp, h[0].State)
		assert.Equal(t, redlock.HealthDown, h[2].State)
		assert.Equal(t, c.rl.Nodes()[2], h[2].Node)
		assert.False(t, h[2].DownSince.Before(diedAt))
		require.Error(t, h[2].LastError)
		assert.Equal(t, 1, strings.Count(logs(), "node down"), logs())
		assert.Contains(t, logs(), "level=WARN msg=\"redlock: node down\" node="+h[2].Node)

		c.nodes[2].Revive(t)
		// go-redis's pool, after refused dials, dials again once a second
		// in the background and fails calls until that succeeds.
		time.Sleep(2 * time.Second)
		cycle(20)
		h = c.rl.Health()
		assert.Equal(t, redlock.HealthUp, h[2].State)
		assert.True(t, h[2].DownSince.IsZero())
		assert.Error(t, h[2].LastError, "the last error is kept")
		assert.Equal(t, 1, strings.Count(logs(), "node down"), logs())
		assert.Equal(t, 1, strings.Count(logs(), "node answers again"), logs())
		assert.Contains(t, logs(), "level=INFO msg=\"redlock: node answers again\" node="+h[2].Node)
	})
}

// An error reply marks the node down with that reply; one about a key's
// data (WRONGTYPE) does not, nor does a call the caller's context ended.
func TestHealth_ErrorRepliesAndCanceledCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		logger, logs := logBuffer()
		c := newCluster(t, 3, redlock.WithLogger(logger), noGuard)
		ctx := context.Background()
		c.nodes[0].Fail("NOAUTH Authentication required.")
		l := c.acquire(t, ctx, "report", 10*time.Second)
		require.NoError(t, l.Release(ctx))
		synctest.Wait()
		h := c.rl.Health()
		assert.Equal(t, redlock.HealthDown, h[0].State)
		var reply redis.Error
		require.ErrorAs(t, h[0].LastError, &reply)
		assert.Contains(t, reply.Error(), "NOAUTH")
		assert.Equal(t, redlock.HealthUp, h[1].State)

		c.nodes[1].Slow(time.Hour)
		canceled, cancel := context.WithCancel(ctx)
		cancel()
		_, err := c.rl.Inspect(canceled, "report")
		require.NoError(t, err)
		assert.Equal(t, redlock.HealthUp, c.rl.Health()[1].State, "a call the caller canceled says nothing of the node")
		assert.Equal(t, 1, strings.Count(logs(), "node down"), logs())
	})
}
