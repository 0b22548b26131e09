package redlock

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

// The amnesia guard's hooks: a quarantine shows in Health until it ends,
// and an incarnation is reported as set.
func TestHealth_QuarantineAndIncarnationHooks(t *testing.T) {
	c := &Client{nodes: []*node{{Name: "a"}, {Name: "b"}}}
	c.health.init(c.nodes, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	c.health.record(ctx, 0, nil)
	c.health.record(ctx, 1, nil)
	until := time.Now().Add(time.Hour)
	c.health.setQuarantine(1, until)
	c.health.setIncarnation(1, "run-1")
	h := c.Health()
	assert.Equal(t, HealthUp, h[0].State)
	assert.Equal(t, HealthQuarantined, h[1].State)
	assert.Equal(t, until, h[1].QuarantinedUntil)
	assert.Equal(t, "run-1", h[1].Incarnation)
	c.health.record(ctx, 1, nil)
	assert.Equal(t, HealthQuarantined, c.Health()[1].State, "an answer does not end a quarantine")
	c.health.setQuarantine(1, time.Time{})
	assert.Equal(t, HealthUp, c.Health()[1].State)
	assert.True(t, c.Health()[1].QuarantinedUntil.IsZero())
}

// A node call that finds its node as it was allocates nothing.
func TestHealth_NoAllocationWhenUnchanged(t *testing.T) {
	c := &Client{nodes: []*node{{Name: "a"}}}
	c.health.init(c.nodes, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	c.health.record(ctx, 0, nil)
	assert.Zero(t, testing.AllocsPerRun(100, func() { c.health.answered(ctx, reply{Idx: 0}) }))
}

// sameSettings compares every field of config but the mutant hook: a new
// field must be added there (and to probeConfig), or Leader would accept an
// option that sets it and ignore it.
func TestSameSettings_CoversEveryField(t *testing.T) {
	assert.Equal(t, 13, reflect.TypeOf(config{}).NumField(), "config changed: update sameSettings and probeConfig")
}

// READONLY fails at once on a node the Client talks to directly, and is
// retried on a Sentinel failover client, which switches to the new master
// by itself.
func TestUnfixableOn_ReadOnlyOnFailoverClient(t *testing.T) {
	readonly := redisErr("READONLY You can't write against a read only replica.")
	direct := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer direct.Close()
	failover := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}})
	defer failover.Close()
	assert.NotNil(t, unfixableOn(&node{Client: direct}, readonly))
	assert.Nil(t, unfixableOn(&node{Client: failover}, readonly))
	assert.Nil(t, unfixableOn(&node{Client: direct}, redisErr("LOADING Redis is loading")))
}

// A quarantine set while the node is down shows once it answers again.
func TestHealth_QuarantineSetWhileDown(t *testing.T) {
	c := &Client{nodes: []*node{{Name: "a"}}}
	c.health.init(c.nodes, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	c.health.record(ctx, 0, redisErr("LOADING Redis is loading the dataset in memory"))
	assert.Equal(t, HealthDown, c.Health()[0].State)
	until := time.Now().Add(time.Hour)
	c.health.setQuarantine(0, until)
	assert.Equal(t, HealthDown, c.Health()[0].State, "down until it answers")
	c.health.record(ctx, 0, nil)
	h := c.Health()[0]
	assert.Equal(t, HealthQuarantined, h.State)
	assert.Equal(t, until, h.QuarantinedUntil)
	assert.True(t, h.DownSince.IsZero())
}
