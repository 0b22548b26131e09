package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// The tests in this file run against real redis-server processes, five per
// test, started on free loopback ports and stopped by pid. They skip when
// redis-server is not installed, and fail instead under CI=true.

// realCluster is five redis-server processes, a redlock Client dialed to them
// with URLs, and a plain go-redis client per server to look at the keys.
type realCluster struct {
	servers []*redisserver.Server
	plain   []*redis.Client
	rl      *redlock.Client
}

func startRealCluster(t *testing.T, opts ...redlock.Option) *realCluster {
	t.Helper()
	redisserver.Require(t)
	// Registered first, so it runs last: after every server is closed, no
	// process of ours is left.
	t.Cleanup(func() {
		assert.Empty(t, redisserver.LivePids(), "redis-server processes left running")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	servers, err := redisserver.StartN(ctx, 5, redisserver.Options{})
	require.NoError(t, err)
	rc := &realCluster{servers: servers}
	for _, s := range servers {
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
	}
	urls := make([]string, len(servers))
	for i, s := range servers {
		require.NotZero(t, s.Pid())
		urls[i] = "redis://" + s.Addr()
		p := redis.NewClient(&redis.Options{
			Addr: s.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1, DialerRetries: 1,
			ContextTimeoutEnabled: true,
		})
		t.Cleanup(func() { _ = p.Close() })
		rc.plain = append(rc.plain, p)
	}
	// The default per-node timeout, 1% of the TTL (100 ms for the 10 s
	// locks here), is tight on a loaded machine running many redis-servers:
	// a node that times out fails a single attempt, extension or release,
	// which is not what these tests are about. opts may set another.
	rl, err := redlock.Dial(urls, append([]redlock.Option{redlock.WithNodeTimeout(500 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rl.Close()) })
	rc.rl = rl
	for i, s := range servers {
		assert.Equal(t, s.Addr()+"/0", rl.Nodes()[i])
	}
	return rc
}

// exists reports whether key exists on server i (asked over a plain client).
func (rc *realCluster) exists(t *testing.T, i int, key string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	n, err := rc.plain[i].Exists(ctx, key).Result()
	require.NoError(t, err, "EXISTS on server %d", i)
	return n == 1
}

// requireNoKey fails unless no live server holds key.
func (rc *realCluster) requireNoKey(t *testing.T, key string, servers ...int) {
	t.Helper()
	if servers == nil {
		servers = []int{0, 1, 2, 3, 4}
	}
	for _, i := range servers {
		if rc.exists(t, i, key) {
			// Whose key, and for how long: a failure under load says
			// whether a delete was lost or a late SET ran after it.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			owner, _ := rc.plain[i].Get(ctx, key).Result()
			ttl, _ := rc.plain[i].PTTL(ctx, key).Result()
			cancel()
			require.Failf(t, "key left", "server %d (%s) still holds %q: owner %q, ttl %v", i, rc.servers[i].Addr(), key, owner, ttl)
		}
	}
}

// requireReleased is requireNoKey once a Release's deletes had time to end:
// Release returns at the majority, the other deletes end in the background
// within the per-node timeout (here at most 5 s, whatever the machine's
// load, is allowed before the test fails).
func (rc *realCluster) requireReleased(t *testing.T, key string, servers ...int) {
	t.Helper()
	if servers == nil {
		servers = []int{0, 1, 2, 3, 4}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, i := range servers {
		for rc.exists(t, i, key) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	rc.requireNoKey(t, key, servers...)
}

// warmUp loads the scripts on every server, so that a server paused later
// runs a queued script call when it resumes instead of answering NOSCRIPT.
func (rc *realCluster) warmUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	l, err := rc.rl.TryAcquire(ctx, "warm-up", 10*time.Second)
	require.NoError(t, err)
	l, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
}

// pause stops server i (SIGSTOP). resume continues it (SIGCONT) and
// requires that to succeed; a server the test did not resume is continued
// when the test ends.
func (rc *realCluster) pause(t *testing.T, i int) (resume func()) {
	t.Helper()
	s := rc.servers[i]
	require.NoError(t, s.Stop())
	stopped := true
	t.Cleanup(func() {
		if stopped {
			_ = s.Cont()
		}
	})
	return func() {
		t.Helper()
		require.NoError(t, s.Cont())
		stopped = false
	}
}

func TestRealRedis_AcquireExtendRelease(t *testing.T) {
	rc := startRealCluster(t)
	ctx := context.Background()
	const ttl = 10 * time.Second

	l, err := rc.rl.Acquire(ctx, "report", ttl)
	require.NoError(t, err)
	assert.Greater(t, l.Token(), uint64(time.Now().Add(-time.Minute).UnixMicro()), "seeded from a node clock in microseconds")
	assert.Greater(t, l.Validity(), ttl-redlock.Drift(ttl, redlock.DefaultDriftFactor)-time.Second)
	// Stragglers may still be on their way; the quorum already holds it.
	holders := 0
	for i, p := range rc.plain {
		v, err := p.Get(ctx, "report").Result()
		if err == redis.Nil {
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, l.Owner(), v, "server %d", i)
		pttl, err := p.PTTL(ctx, "report").Result()
		require.NoError(t, err)
		assert.Greater(t, pttl, ttl-time.Second, "server %d", i)
		assert.LessOrEqual(t, pttl, ttl, "server %d", i)
		holders++
	}
	assert.GreaterOrEqual(t, holders, 3)

	_, err = rc.rl.TryAcquire(ctx, "report", ttl)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "held: a second acquisition must fail")

	l2, err := l.Extend(ctx, 20*time.Second)
	require.NoError(t, err)
	assert.Equal(t, l.Token(), l2.Token())
	assert.True(t, l2.ValidUntil().After(l.ValidUntil()))
	extended := 0
	for _, p := range rc.plain {
		if pttl, err := p.PTTL(ctx, "report").Result(); err == nil && pttl > ttl {
			extended++
		}
	}
	assert.GreaterOrEqual(t, extended, 3)

	require.NoError(t, l2.Release(ctx))
	rc.requireReleased(t, "report")

	l3, err := rc.rl.TryAcquire(ctx, "report", ttl)
	require.NoError(t, err)
	assert.Greater(t, l3.Token(), l.Token())
	require.NoError(t, l3.Release(ctx))
	rc.requireReleased(t, "report")
}

func TestRealRedis_MinorityKilledStillAcquires(t *testing.T) {
	rc := startRealCluster(t)
	ctx := context.Background()
	killed := []int{1, 3}
	for _, i := range killed {
		require.NoError(t, rc.servers[i].Kill())
	}

	l, err := rc.rl.TryAcquire(ctx, "report", 10*time.Second)
	require.NoError(t, err)
	for _, i := range killed {
		assert.Contains(t, []redlock.Outcome{redlock.OutcomeUnreachable, redlock.OutcomePending}, l.Nodes()[i].Outcome, "server %d", i)
	}
	_, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	rc.requireReleased(t, "report", 0, 2, 4)
}

func TestRealRedis_MajorityKilledFailsFast(t *testing.T) {
	rc := startRealCluster(t)
	ctx := context.Background()
	killed := []int{0, 2, 4}
	for _, i := range killed {
		require.NoError(t, rc.servers[i].Kill())
	}

	start := time.Now()
	l, err := rc.rl.TryAcquire(ctx, "report", 10*time.Second)
	elapsed := time.Since(start)
	assert.Nil(t, l, "no false success")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	// A sanity bound, not a performance figure: a refused connection must
	// not be retried for seconds.
	assert.Less(t, elapsed, 2*time.Second)
	qe := quorumError(t, err)
	unreachable := 0
	for _, i := range killed {
		o := qe.Nodes[i].Outcome
		assert.Contains(t, []redlock.Outcome{redlock.OutcomeUnreachable, redlock.OutcomePending}, o, "server %d", i)
		if o == redlock.OutcomeUnreachable {
			unreachable++
		}
	}
	assert.GreaterOrEqual(t, unreachable, 2, "the vote fails once a majority is impossible")
	assert.Less(t, qe.Granted, qe.Quorum)
	rc.requireNoKey(t, "report", 1, 3)
}

// A wrong password on real servers: Acquire with no deadline and the
// default retry policy fails after one attempt, naming the server's reply,
// instead of retrying for ever.
func TestRealRedis_WrongPasswordFailsAtOnce(t *testing.T) {
	rc := startRealCluster(t)
	ctx := context.Background()
	urls := make([]string, len(rc.servers))
	for i, s := range rc.servers {
		require.NoError(t, rc.plain[i].ConfigSet(ctx, "requirepass", "right").Err())
		urls[i] = "redis://:wrong@" + s.Addr()
	}
	// A node whose dial timed out (the default per-node timeout is 100 ms
	// for this TTL) may still grant: the retry would be right, and
	// Attempts == 1 flaky on a loaded machine.
	rl, err := redlock.Dial(urls, redlock.WithNodeTimeout(2*time.Second))
	require.NoError(t, err)
	defer func() { assert.NoError(t, rl.Close()) }()
	ctx, cancel := context.WithTimeout(ctx, time.Minute) // only a bound for a broken build
	defer cancel()
	_, err = rl.Acquire(ctx, "report", 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.NotErrorIs(t, err, context.DeadlineExceeded, "it must not retry until the deadline")
	assert.Equal(t, 1, quorumError(t, err).Attempts)
	var reply redis.Error
	require.ErrorAs(t, err, &reply)
	assert.Contains(t, reply.Error(), "WRONGPASS")
}

// One SIGSTOPped server must not hold up Acquire: it is left pending (or
// timed out) and the quorum of the other four decides.
func TestRealRedis_PausedNodeDoesNotBlock(t *testing.T) {
	rc := startRealCluster(t)
	rc.warmUp(t)
	ctx := context.Background()
	resume := rc.pause(t, 2)

	start := time.Now()
	l, err := rc.rl.Acquire(ctx, "report", 10*time.Second)
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 2*time.Second, "sanity bound: the paused server is not waited for")
	assert.Contains(t, []redlock.Outcome{redlock.OutcomePending, redlock.OutcomeTimedOut}, l.Nodes()[2].Outcome)

	// On SIGCONT the server runs the acquire script it received while
	// paused; the release sent afterwards deletes that key too.
	resume()
	require.NoError(t, l.Release(ctx))
	rc.requireReleased(t, "report")
}

// A lock released while one server is paused: once the server resumes it may
// still set our key (the acquire script was already in its socket, while the
// release needed a new connection whose handshake the paused server never
// answered), and that key only expires at its TTL. It must not keep the next
// client from taking the lock on the other servers.
func TestRealRedis_ReleasedWhilePausedDoesNotBlockNextHolder(t *testing.T) {
	rc := startRealCluster(t)
	rc.warmUp(t)
	ctx := context.Background()
	resume := rc.pause(t, 2)

	l, err := rc.rl.Acquire(ctx, "report", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx), "four of five servers confirmed the release")
	rc.requireReleased(t, "report", 0, 1, 3, 4)
	resume()

	next, err := rc.rl.TryAcquire(ctx, "report", 10*time.Second)
	require.NoError(t, err, "the next holder gets the lock at once")
	t.Logf("owners: first %q, next %q; next's node results %v", l.Owner(), next.Owner(), next.Nodes())
	assert.Greater(t, next.Token(), l.Token())
	require.NoError(t, next.Release(ctx))
	rc.requireReleased(t, "report", 0, 1, 3, 4)
}

// The replies that stop Acquire are worded by redis-server 7 as the prefixes
// in acquire.go expect, also when Redis raises them inside the acquire
// script ("WRONGTYPE ... script: <sha>, on @user_script:N."): a hash under
// the name of the lock's fencing counter on three of five servers (the
// script's SET NX has applied when its INCR fails: the clean-up deletes the
// key there too), and an ACL user whose key pattern excludes the lock, each
// fail after one attempt with no deadline. (A key of another type under the
// lock's own name is no WRONGTYPE: SET NX finds the name taken.)
func TestRealRedis_UnfixableRepliesFailAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name, reply string
		setUp       func(t *testing.T, rc *realCluster, i int) string // returns the node's URL
	}{
		{"WRONGTYPE", "WRONGTYPE Operation against a key holding the wrong kind of value script: ", func(t *testing.T, rc *realCluster, i int) string {
			require.NoError(t, rc.plain[i].HSet(context.Background(), "{report}:fence", "a", "b").Err())
			return "redis://" + rc.servers[i].Addr()
		}},
		{"NOPERM", "NOPERM this user has no permissions to access one of the keys", func(t *testing.T, rc *realCluster, i int) string {
			require.NoError(t, rc.plain[i].Do(context.Background(), "ACL", "SETUSER", "locker", "on", ">pw", "~other:*", "+@all").Err())
			return "redis://locker:pw@" + rc.servers[i].Addr()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := startRealCluster(t)
			urls := make([]string, len(rc.servers))
			for i, s := range rc.servers {
				urls[i] = "redis://" + s.Addr()
				if i < 3 {
					urls[i] = tc.setUp(t, rc, i)
				}
			}
			// A per-node timeout long enough that no server times out on a
			// loaded machine: a timed-out node may still grant, and a
			// retry would then be right.
			rl, err := redlock.Dial(urls, redlock.WithNodeTimeout(2*time.Second))
			require.NoError(t, err)
			defer func() { assert.NoError(t, rl.Close()) }()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only a bound for a broken build
			defer cancel()
			_, err = rl.Acquire(ctx, "report", 10*time.Second)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			assert.NotErrorIs(t, err, context.DeadlineExceeded, "it must not retry until the deadline")
			assert.Equal(t, 1, quorumError(t, err).Attempts)
			var reply redis.Error
			require.ErrorAs(t, err, &reply)
			assert.Contains(t, reply.Error(), tc.reply)
			for i := range rc.servers {
				assert.False(t, rc.exists(t, i, "report"), "server %d: the attempt's key is deleted", i)
			}
		})
	}
}
