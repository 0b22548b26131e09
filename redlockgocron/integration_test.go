package redlockgocron_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
	"github.com/d3b93e30/redlock/redlockgocron"
)

// The tests in this file run the replicas against three real redis-server
// processes, on the wall clock: intervals of a second, a few ticks each.
// They skip when redis-server is not installed, and fail instead under
// CI=true.

// realServers starts three redis-servers and returns them and one Client
// per replica over them.
func realServers(t *testing.T, replicas int) ([]*redisserver.Server, []*redlock.Client) {
	t.Helper()
	redisserver.Require(t)
	t.Cleanup(func() {
		assert.Empty(t, redisserver.LivePids(), "redis-server processes left running")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	servers, err := redisserver.StartN(ctx, 3, redisserver.Options{})
	require.NoError(t, err)
	urls := make([]string, len(servers))
	for i, s := range servers {
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		urls[i] = "redis://" + s.Addr()
	}
	clients := make([]*redlock.Client, replicas)
	for i := range clients {
		c, err := redlock.Dial(urls)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, c.Close()) })
		clients[i] = c
	}
	return servers, clients
}

// Three replicas started 150 ms apart run a short job once per tick.
func TestRedisServer_OneRunPerTick(t *testing.T) {
	_, clients := realServers(t, 3)
	sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 5,
		starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond}}
	t0, runs := sc.replicas(t, clients)
	assert.Equal(t, ones(5), sc.perTick(t, t0, runs))
	requireOneAtATime(t, runs, false)
}

// A job longer than its interval and than the TTL never runs twice at once,
// also when a server is killed while it runs.
func TestRedisServer_LongJobAndAServerKilled(t *testing.T) {
	servers, clients := realServers(t, 3)
	sc := scenario{interval: time.Second, work: 2400 * time.Millisecond, ticks: 6,
		starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond},
		opts:   []redlockgocron.Option{redlockgocron.WithTTL(time.Second)}}
	sc.during = func(t0 time.Time) {
		time.Sleep(time.Until(t0.Add(4500 * time.Millisecond))) // within tick 4's run
		require.NoError(t, servers[1].Kill())
	}
	t0, runs := sc.replicas(t, clients)
	requireOneAtATime(t, runs, false)
	assert.Equal(t, []int{1, 0, 0, 1, 0, 0}, sc.perTick(t, t0, runs))
}

// With Electors, one replica leads and runs each tick once.
func TestRedisServer_Elector(t *testing.T) {
	_, clients := realServers(t, 3)
	sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 4, elector: true,
		starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond}}
	t0, runs := sc.replicas(t, clients)
	assert.Equal(t, ones(4), sc.perTick(t, t0, runs))
	requireOneAtATime(t, runs, true)
}
