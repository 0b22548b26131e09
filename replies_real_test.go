package redlock_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// The node replies no retry can fix, each made by a real redis-server set
// up to give it: the call fails after one attempt with ErrMisconfigured,
// naming the node and what to fix, and the transient ones are retried.

// startServers starts n redis-servers with args, stopped by pid at the
// test's end, and returns them with a plain client to each.
func startServers(t *testing.T, n int, args ...string) ([]*redisserver.Server, []*redis.Client) {
	t.Helper()
	redisserver.Require(t)
	t.Cleanup(func() { assert.Empty(t, redisserver.LivePids(), "redis-server processes left running") })
	return startServersWith(t, n, redisserver.Options{Args: args})
}

// startServersWith is startServers with all of redisserver's options, and
// without the check that no server is left running at the test's end: a
// parallel subtest's servers are not the only ones running, so its parent
// checks that.
func startServersWith(t *testing.T, n int, opt redisserver.Options) ([]*redisserver.Server, []*redis.Client) {
	t.Helper()
	redisserver.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	servers, err := redisserver.StartN(ctx, n, opt)
	require.NoError(t, err)
	plain := make([]*redis.Client, n)
	for i, s := range servers {
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		plain[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		t.Cleanup(func() { _ = plain[i].Close() })
	}
	return servers, plain
}

// dialServers dials servers, each URL made by url from the address, with
// opts after the test's own.
func dialServers(t *testing.T, servers []*redisserver.Server, url func(addr string) string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = url(s.Addr())
	}
	// A generous per-node timeout: a node whose dial timed out on a loaded
	// machine may still grant, and the retry would then be right.
	rl, err := redlock.Dial(urls, append([]redlock.Option{redlock.WithNodeTimeout(2 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rl.Close()) })
	return rl
}

// requireMisconfigured checks that err is a failed Acquire, after one
// attempt, that matches ErrMisconfigured and says want.
func requireMisconfigured(t *testing.T, err error, want string) {
	t.Helper()
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorIs(t, err, redlock.ErrMisconfigured, "%v", err)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "it must not retry until the deadline")
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, 1, qe.Attempts)
	assert.Contains(t, err.Error(), want)
	var reply redis.Error
	assert.ErrorAs(t, err, &reply, "the node's own reply is still there")
}

func acquireOnce(t *testing.T, rl *redlock.Client) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only a bound for a broken build
	defer cancel()
	l, err := rl.Acquire(ctx, "report", 10*time.Second)
	if err == nil {
		assert.NoError(t, l.Release(ctx))
	}
	return err
}

func TestRealRedis_MisconfiguredFailsAtOnce(t *testing.T) {
	t.Run("no password", func(t *testing.T) {
		servers, plain := startServers(t, 3)
		for _, p := range plain {
			require.NoError(t, p.ConfigSet(context.Background(), "requirepass", "right").Err())
		}
		rl := dialServers(t, servers, func(a string) string { return "redis://" + a })
		err := acquireOnce(t, rl)
		requireMisconfigured(t, err, "/0 requires a password: set it in the URL (redis://:PASSWORD@host) or Options.Password")
		// It names the first node whose reply decided the vote: any of them.
		named := 0
		for _, s := range servers {
			if strings.Contains(err.Error(), "node "+s.Addr()+"/0 requires a password") {
				named++
			}
		}
		assert.Equal(t, 1, named, "the error names one node: %v", err)
	})
	t.Run("wrong password", func(t *testing.T) {
		servers, plain := startServers(t, 3)
		for _, p := range plain {
			require.NoError(t, p.ConfigSet(context.Background(), "requirepass", "right").Err())
		}
		rl := dialServers(t, servers, func(a string) string { return "redis://:wrong@" + a })
		requireMisconfigured(t, acquireOnce(t, rl), "refused the username or password")
	})
	t.Run("ACL user without EVALSHA", func(t *testing.T) {
		servers, plain := startServers(t, 3)
		for _, p := range plain {
			require.NoError(t, p.Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval").Err())
		}
		rl := dialServers(t, servers, func(a string) string { return "redis://locker:pw@" + a })
		requireMisconfigured(t, acquireOnce(t, rl), "denies the ACL user a command or key the lock needs")
	})
	t.Run("EVALSHA renamed away", func(t *testing.T) {
		servers, _ := startServers(t, 3, "--rename-command", "EVALSHA", "")
		rl := dialServers(t, servers, func(a string) string { return "redis://" + a })
		requireMisconfigured(t, acquireOnce(t, rl), "does not know a command the lock needs")
	})
	t.Run("replicas", func(t *testing.T) {
		servers, plain := startServers(t, 4)
		// Servers 1 to 3 replicate server 0; the Client is given them only.
		for _, p := range plain[1:] {
			require.NoError(t, p.Do(context.Background(), "REPLICAOF", "127.0.0.1", fmt.Sprint(servers[0].Port())).Err())
		}
		rl := dialServers(t, servers[1:], func(a string) string { return "redis://" + a })
		requireMisconfigured(t, acquireOnce(t, rl), "is a read-only replica")
	})
	t.Run("cluster node", func(t *testing.T) {
		servers, plain := startServers(t, 4, "--cluster-enabled", "yes")
		ctx := context.Background()
		// Server 0 serves every slot; 1 to 3 join its cluster with none,
		// so they answer MOVED for every key.
		require.NoError(t, plain[0].Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
		for _, p := range plain[1:] {
			require.NoError(t, p.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", fmt.Sprint(servers[0].Port())).Err())
		}
		for _, p := range plain[1:] {
			require.Eventually(t, func() bool {
				err := p.Get(ctx, "report").Err()
				return err != nil && strings.HasPrefix(err.Error(), "MOVED")
			}, 20*time.Second, 50*time.Millisecond, "the node joins the cluster")
		}
		rl := dialServers(t, servers[1:], func(a string) string { return "redis://" + a })
		requireMisconfigured(t, acquireOnce(t, rl), "is a Redis Cluster node")
	})
}

// A node running a script past busy-reply-threshold answers BUSY: that is
// retried, and the lock is taken once the script is killed.
func TestRealRedis_BusyIsRetried(t *testing.T) {
	servers, plain := startServers(t, 1, "--busy-reply-threshold", "50")
	ctx := context.Background()
	blocker := redis.NewClient(&redis.Options{Addr: servers[0].Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1, ReadTimeout: -1})
	defer func() { _ = blocker.Close() }()
	looping := make(chan error, 1)
	go func() { looping <- blocker.Eval(ctx, "while true do end", nil).Err() }()
	require.Eventually(t, func() bool {
		err := plain[0].Ping(ctx).Err()
		return err != nil && strings.HasPrefix(err.Error(), "BUSY")
	}, 10*time.Second, 10*time.Millisecond, "the script runs")

	rl := dialServers(t, servers, func(a string) string { return "redis://" + a })
	got := make(chan error, 1)
	go func() { got <- acquireOnce(t, rl) }()
	// It keeps retrying while the node is busy; it is not refused at once.
	select {
	case err := <-got:
		t.Fatalf("Acquire returned while the node was busy: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	// SCRIPT KILL is one of the few commands a busy node runs.
	require.NoError(t, plain[0].ScriptKill(ctx).Err())
	require.Error(t, <-looping)
	require.NoError(t, <-got)
}
