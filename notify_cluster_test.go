package redlock_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// redisCluster is a Redis Cluster of real redis-server masters started by
// the test: a ClusterClient over it, and a plain client per master.
type redisCluster struct {
	cc    *redis.ClusterClient
	plain []*redis.Client
}

// startRedisCluster starts a Redis Cluster of three masters (redis-server
// with cluster-enabled yes on free ports), gives each a third of the 16384
// slots, joins them with CLUSTER MEET and waits until every node reports
// cluster_state:ok. It skips the test where redis-server is missing (fails
// under CI=true); the servers are stopped by pid when the test ends.
func startRedisCluster(t *testing.T) *redisCluster {
	t.Helper()
	redisserver.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	rc := &redisCluster{}
	buses := make([]int, n)
	addrs := make([]string, n)
	for i := range n {
		buses[i] = freePort(t)
		s, err := redisserver.Start(ctx, redisserver.Options{Args: []string{
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(buses[i]),
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000",
		}})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		addrs[i] = s.Addr()
		p := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true})
		t.Cleanup(func() { _ = p.Close() })
		rc.plain = append(rc.plain, p)
	}
	for i, p := range rc.plain {
		lo, hi := i*16384/n, (i+1)*16384/n-1
		require.NoError(t, p.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err())
		if i > 0 {
			host, port, err := net.SplitHostPort(addrs[i])
			require.NoError(t, err)
			require.NoError(t, rc.plain[0].Do(ctx, "CLUSTER", "MEET", host, port, buses[i]).Err())
		}
	}
	require.Eventually(t, func() bool {
		for _, p := range rc.plain {
			info, err := p.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:3") {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond, "the cluster forms")
	rc.cc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rc.cc.Close() })
	return rc
}

// freePort returns a loopback TCP port that was free a moment ago (for a
// cluster bus port: redis-server's default, port + 10000, can be above
// 65535 for the ports the kernel hands out).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// On a Redis Cluster used as one node, a release wakes the waiter of any
// key, whichever master serves the key's slot, not only of keys with a
// hash tag: the waiter's channels carry the key's hash tag, so it
// subscribes on the master where the release script looks for them. The
// waiter's retry delay is an hour: only the wake-up lets it take the lock,
// on its second attempt, before its 15 s deadline. One waiting Client
// serves keys on every master in turn: its pub/sub is one connection per
// master, not one in all. Before the fix the untagged keys' waiters were
// subscribed on whatever master the first channel's slot named, and slept
// through the releases of the keys of the other masters.
func TestRealRedisCluster_ReleaseWakesTheWaiterOfEveryKey(t *testing.T) {
	rc := startRedisCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holder, err := redlock.New([]redis.UniversalClient{rc.cc})
	require.NoError(t, err)
	defer func() { assert.NoError(t, holder.Close()) }()
	waiter, err := redlock.New([]redis.UniversalClient{rc.cc}, redlock.WithRetry(redlock.LinearRetry(time.Hour, 0, 0)))
	require.NoError(t, err)
	defer func() { assert.NoError(t, waiter.Close()) }()

	// Untagged keys served by each master in turn, then a tagged one.
	masterOf := func(key string) string {
		m, err := rc.cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		return m.Options().Addr
	}
	var keys []string
	seen := map[string]bool{}
	for i := 0; len(seen) < len(rc.plain); i++ {
		key := fmt.Sprintf("job-%d", i)
		if m := masterOf(key); !seen[m] {
			seen[m] = true
			keys = append(keys, key)
		}
	}
	keys = append(keys, "user:{7}")

	// subscribed reports whether the waiter's presence channel for key is
	// subscribed on some master.
	subscribed := func(key string) bool {
		for _, p := range rc.plain {
			m, err := p.PubSubNumSub(ctx, redlock.WaitingChannel(key)).Result()
			if err == nil && m[redlock.WaitingChannel(key)] > 0 {
				return true
			}
		}
		return false
	}
	for _, key := range keys {
		held, err := holder.TryAcquire(ctx, key, time.Minute)
		require.NoError(t, err, key)
		type result struct {
			l   *redlock.Lock
			err error
		}
		got := make(chan result, 1)
		wctx, wcancel := context.WithTimeout(ctx, 15*time.Second)
		go func() {
			l, err := waiter.Acquire(wctx, key, time.Minute)
			got <- result{l, err}
		}()
		require.Eventually(t, func() bool { return subscribed(key) }, 10*time.Second, 5*time.Millisecond, "%s: the waiter subscribes", key)
		require.NoError(t, held.Release(ctx), key)
		r := <-got
		wcancel()
		require.NoError(t, r.err, "%s (master %s): the waiter, whose retry delay is an hour, was not woken by the release", key, masterOf(key))
		assert.Equal(t, 2, r.l.Attempts(), "%s: the failed attempt, then the one the release woke", key)
		require.NoError(t, r.l.Release(ctx), key)
	}
}
