package redlockgocron_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockgocron"
)

// With an Elector on every replica, one replica leads and runs every tick
// once, in one term (one fencing token), however the replicas are started.
func TestElector_OneLeaderRunsEveryTickOnce(t *testing.T) {
	sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 11, elector: true,
		starts: []time.Duration{300 * time.Millisecond, 0, 150 * time.Millisecond}}
	inProcess(t, sc, func(t *testing.T, _ []*testNode, t0 time.Time, runs []run) {
		assert.Equal(t, ones(11), sc.perTick(t, t0, runs))
		requireOneAtATime(t, runs, true)
		for _, r := range runs {
			assert.Equal(t, 1, r.replica, "the replica that started first leads")
			assert.Equal(t, runs[0].token, r.token, "one term")
		}
	})
}

// A job longer than its interval, with gocron's singleton mode, never runs
// twice at once on the leader, and a node killed meanwhile changes nothing:
// the leadership is kept alive on the other two.
func TestElector_LongJobAndANodeKilled(t *testing.T) {
	var nodes []*testNode
	sc := scenario{interval: time.Second, work: 2400 * time.Millisecond, ticks: 9, elector: true, singleton: true,
		starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond},
		opts:   []redlockgocron.Option{redlockgocron.WithTTL(time.Second)}}
	sc.during = func(t0 time.Time) {
		time.Sleep(time.Until(t0.Add(4*time.Second + 20*time.Millisecond)))
		nodes[2].Kill()
	}
	synctest.Test(t, func(t *testing.T) {
		nodes = newNodes(t, 3)
		clients := []*redlock.Client{newReplica(t, nodes), newReplica(t, nodes), newReplica(t, nodes)}
		t0, runs := sc.replicas(t, clients)
		requireOneAtATime(t, runs, true)
		assert.Equal(t, []int{1, 0, 0, 1, 0, 0, 1, 0, 0}, sc.perTick(t, t0, runs))
		for _, r := range runs {
			assert.Equal(t, runs[0].token, r.token, "one term")
		}
	})
}

// Leadership moves: the leader's Close frees it for the next replica that
// asks, whose term has a greater token; a lost leadership (the lock gone from
// the nodes) is noticed, given up and taken again; a closed Elector never
// leads again.
func TestElector_Terms(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newNodes(t, 3)
		ctx := context.Background()
		var es []*redlockgocron.Elector
		for range 2 {
			e, err := redlockgocron.NewElector(newReplica(t, nodes), redlockgocron.WithTTL(time.Second))
			require.NoError(t, err)
			t.Cleanup(func() { _ = e.Close(ctx) })
			es = append(es, e)
		}
		a, b := es[0], es[1]
		require.NoError(t, a.IsLeader(ctx))
		require.NoError(t, a.IsLeader(ctx), "still")
		first := a.Lease().Lock().Token()
		err := b.IsLeader(ctx)
		require.ErrorIs(t, err, redlockgocron.ErrNotLeader)
		require.ErrorIs(t, err, redlock.ErrTaken)
		assert.Nil(t, b.Lease())

		time.Sleep(5 * time.Second) // kept alive past its TTL
		require.NoError(t, a.IsLeader(ctx))
		require.Equal(t, first, a.Lease().Lock().Token(), "the same term")

		// The lock vanishes from the nodes (as after a long partition):
		// the next extension fails and the leadership is lost.
		lost := a.Lease()
		for _, n := range nodes {
			n.m.Del("gocron:leader")
		}
		<-lost.Done()
		require.ErrorIs(t, lost.Err(), redlock.ErrLockLost)
		assert.Nil(t, a.Lease())
		require.NoError(t, b.IsLeader(ctx), "free: b takes it")
		second := b.Lease().Lock().Token()
		assert.Greater(t, second, first)
		require.ErrorIs(t, a.IsLeader(ctx), redlock.ErrTaken, "a gave its lost term up and found b leading")

		require.NoError(t, b.Close(ctx))
		require.ErrorIs(t, b.IsLeader(ctx), redlockgocron.ErrNotLeader, "closed")
		assert.Nil(t, b.Lease())
		require.NoError(t, a.IsLeader(ctx), "b's Close freed it")
		assert.Greater(t, a.Lease().Lock().Token(), second)
		require.NoError(t, a.Close(ctx))
		require.NoError(t, a.Close(ctx), "a second Close")
	})
}
