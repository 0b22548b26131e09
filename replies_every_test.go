package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// Every row of the table of node replies, made by a real redis-server set
// up to send it. A prefix that the table has but the server never sends
// (or sends otherwise, from inside a script say) would leave the reply
// unclassified: retried as an outage when it should fail at once, or the
// other way round. So each case makes the server send the row's reply to a
// plain command and checks the table's row for that very text, then, where
// one of the lock's own calls can meet the reply, that the call does what
// the row means: fails after one attempt with ErrMisconfigured naming the
// node (unfixable), or retries (transient).

// replyCase makes real redis-servers send one row's reply.
type replyCase struct {
	// prefix is the row's prefix in the table.
	prefix string
	// kind is what the row must say of the reply: "unfixable" or
	// "transient" (redlock.ReplyRule.Kind). It is written here, not read
	// from the table, so that a row whose kind changes turns the test red.
	kind string
	// provoke sets servers up to send the reply and returns one such reply
	// to a plain command, and a check of a call of the lock on the same
	// server; nil when no call of the library can meet the reply (the case
	// says why).
	provoke func(t *testing.T, cl *replyCluster) (reply error, onLock func(t *testing.T))
}

func TestRealRedis_EveryReplyRule(t *testing.T) {
	redisserver.Require(t)
	t.Cleanup(func() { assert.Empty(t, redisserver.LivePids(), "redis-server processes left running") })
	cl := startReplyCluster(t)
	cases := replyCases()
	for _, row := range redlock.ReplyRules() {
		t.Run(strings.TrimSpace(row.Prefix), func(t *testing.T) {
			t.Parallel()
			c, ok := replyCaseOf(cases, row.Prefix)
			require.True(t, ok, "the row %q has no real-server case: add one to replyCases", row.Prefix)
			reply, onLock := c.provoke(t, cl)
			got := requireReplyOfRow(t, reply, c.prefix)
			t.Logf("redis-server answered: %s", reply)
			assert.Equal(t, c.kind, got.Kind, "what the table says of the reply %q", reply)
			if onLock != nil {
				onLock(t)
			}
		})
	}
}

// TestReplyRules_EachHasARealServerCase needs no redis-server: a row added
// to the table without a case, or a case left for a row that is gone, is
// caught wherever the tests run.
func TestReplyRules_EachHasARealServerCase(t *testing.T) {
	cases := replyCases()
	rows := redlock.ReplyRules()
	for _, row := range rows {
		c, ok := replyCaseOf(cases, row.Prefix)
		if assert.True(t, ok, "the row %q has no real-server case in replyCases", row.Prefix) {
			assert.Equal(t, c.kind, row.Kind, "the row %q", row.Prefix)
		}
	}
	for _, c := range cases {
		found := false
		for _, row := range rows {
			found = found || row.Prefix == c.prefix
		}
		assert.True(t, found, "the case %q is for no row of the table", c.prefix)
	}
	seen := map[string]bool{}
	for _, c := range cases {
		assert.False(t, seen[c.prefix], "two cases for the row %q", c.prefix)
		seen[c.prefix] = true
	}
}

func replyCaseOf(cases []replyCase, prefix string) (replyCase, bool) {
	for _, c := range cases {
		if c.prefix == prefix {
			return c, true
		}
	}
	return replyCase{}, false
}

// requireReplyOfRow checks that err is a node's own reply (not a
// connection error) and that the table's row for it has prefix, and
// returns the row.
func requireReplyOfRow(t *testing.T, err error, prefix string, msgAndArgs ...any) redlock.ReplyRule {
	t.Helper()
	var reply redis.Error
	require.ErrorAs(t, err, &reply, append([]any{"want a reply of the server, got %v", err}, msgAndArgs...)...)
	row, ok := redlock.ReplyRuleOf(err)
	require.True(t, ok, "no row of the table matches the reply %q", reply.Error())
	require.Equal(t, prefix, row.Prefix, "the row that matches the reply %q", reply.Error())
	return row
}

// requireAcquireRefused checks that err, of Acquire (or AcquireMulti) on a
// Client of the one node at addr, is the failure after one attempt that
// the unfixable row prefix makes: ErrMisconfigured, naming the node and the
// row's fix, with the node's reply of that row.
func requireAcquireRefused(t *testing.T, err error, addr, prefix string) {
	t.Helper()
	row := requireReplyOfRow(t, err, prefix)
	requireMisconfigured(t, err, "node "+addr+"/0 "+row.Fix)
	t.Logf("the lock's call failed at once: %v", err)
}

// requireRetried checks what Acquire on the one node at addr does while the
// node answers the transient row prefix: it retries, making every attempt
// its policy allows (three), each met by that reply, and never fails as
// misconfigured.
func requireRetried(t *testing.T, addr, key, prefix string) {
	t.Helper()
	var log attemptLog
	rl := dialAddr(t, addr, redlock.WithObserver(&log))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // only a bound for a broken build
	defer cancel()
	_, err := rl.Acquire(ctx, key, 10*time.Second, redlock.WithRetry(redlock.LinearRetry(10*time.Millisecond, 0, 3)))
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NotErrorIs(t, err, redlock.ErrMisconfigured, "a transient reply must be retried")
	assert.Equal(t, 3, quorumError(t, err).Attempts)
	attempts := log.all()
	require.Len(t, attempts, 3)
	for i, e := range attempts {
		require.Len(t, e.Nodes, 1)
		requireReplyOfRow(t, e.Nodes[0].Err, prefix, "attempt %d", i+1)
	}
	t.Logf("the lock's call retried %d times on: %v", len(attempts)-1, attempts[0].Nodes[0].Err)
}

// attemptLog is an Observer that keeps the acquisition attempts it hears
// of, each with its node's outcome.
type attemptLog struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (l *attemptLog) Observe(e redlock.Event) {
	if e.Op == redlock.OpAcquire {
		l.mu.Lock()
		l.events = append(l.events, e)
		l.mu.Unlock()
	}
}

func (l *attemptLog) all() []redlock.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// requireACLFixWorks gives a new ACL user the rules the fix of row prefix
// tells (after "ACL SETUSER ..."), and checks that a Client logged in as
// that user takes, extends and releases a lock with no denial in the
// node's ACL log: what the error tells to do must be enough.
func requireACLFixWorks(t *testing.T, servers []*redisserver.Server, admin *redis.Client, prefix string) {
	t.Helper()
	ctx := context.Background()
	fix := rowOf(t, prefix).Fix
	_, rules, ok := strings.Cut(fix, "ACL SETUSER ... ")
	require.True(t, ok, "the fix %q tells the ACL rules", fix)
	rules, _, ok = strings.Cut(rules, ")")
	require.True(t, ok, "the fix %q", fix)
	args := []any{"ACL", "SETUSER", "fixed", "on", ">pw", "~*", "&*"}
	for _, r := range strings.Fields(rules) {
		args = append(args, r)
	}
	require.NoError(t, admin.Do(ctx, args...).Err())
	rl := dialServers(t, servers, func(a string) string { return "redis://fixed:pw@" + a })
	l, err := rl.Acquire(ctx, "fixed", 10*time.Second)
	require.NoError(t, err, "a user with the rules %q", rules)
	_, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	log, err := admin.ACLLog(ctx, 100).Result()
	require.NoError(t, err)
	for _, e := range log {
		assert.NotEqual(t, "fixed", e.Username, "a denial of a user with the rules %q: %+v", rules, e)
	}
}

// rowOf returns the table's row of prefix.
func rowOf(t *testing.T, prefix string) redlock.ReplyRule {
	t.Helper()
	for _, r := range redlock.ReplyRules() {
		if r.Prefix == prefix {
			return r
		}
	}
	t.Fatalf("no row %q in the table", prefix)
	return redlock.ReplyRule{}
}

// dialAddr dials a Client of the one node at addr (no password).
func dialAddr(t *testing.T, addr string, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	rl, err := redlock.Dial([]string{"redis://" + addr}, append([]redlock.Option{redlock.WithNodeTimeout(2 * time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rl.Close()) })
	return rl
}

// userClient is a plain client of the node at addr that logs in as user
// (no password when user is "") with password.
func userClient(t *testing.T, addr, user, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: password, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// passwordServer starts a server that requires the password "right" (set
// after the start, which checks the server with a PING without password).
// Only connections made after that need it: ask it with a new client.
func passwordServer(t *testing.T) []*redisserver.Server {
	t.Helper()
	servers, plain := startServersWith(t, 1, redisserver.Options{})
	require.NoError(t, plain[0].ConfigSet(context.Background(), "requirepass", "right").Err())
	return servers
}

// anySha is the SHA1 of no script the servers know.
const anySha = "0123456789abcdef0123456789abcdef01234567"

// replyCluster is three cluster-enabled redis-servers, shared by the cases
// of the Redis Cluster replies (setting a cluster up takes seconds): a
// serves every slot, b joined a's cluster with none (it redirects every key
// to a), c is a cluster of its own with no slot at all.
type replyCluster struct {
	a, b, c    *redisserver.Server
	pa, pb, pc *redis.Client
}

func startReplyCluster(t *testing.T) *replyCluster {
	servers, plain := startServersWith(t, 3, redisserver.Options{Args: []string{"--cluster-enabled", "yes"}})
	cl := &replyCluster{a: servers[0], b: servers[1], c: servers[2], pa: plain[0], pb: plain[1], pc: plain[2]}
	ctx := context.Background()
	require.NoError(t, cl.pa.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
	require.NoError(t, cl.pb.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", fmt.Sprint(cl.a.Port())).Err())
	return cl
}

// serving waits until a serves its slots: a node that serves every slot
// says the cluster is down until its state turns ok, some time after it
// started (2 s in Redis 7.0).
func (cl *replyCluster) serving(t *testing.T) {
	t.Helper()
	poll(t, "a serves every slot", func() (bool, any) {
		err := cl.pa.Get(context.Background(), "serving").Err()
		return errors.Is(err, redis.Nil), err
	})
}

// migrating puts the slot of lock name (and so of its fencing counter and
// epoch) on a in MIGRATING state to b, once a knows b.
func (cl *replyCluster) migrating(t *testing.T, name string) {
	t.Helper()
	ctx := context.Background()
	slot, err := cl.pa.ClusterKeySlot(ctx, name).Result()
	require.NoError(t, err)
	id, err := cl.pb.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	poll(t, "a knows b", func() (bool, any) {
		err := cl.pa.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", id).Err()
		return err == nil, err
	})
}

// poll calls cond until it reports true, for at most 20 s (a bound for a
// broken build, not a measure), and fails with what and cond's last word
// if it never does.
func poll(t *testing.T, what string, cond func() (bool, any)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 20 s (last: %v)", what, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pollReply calls call until it answers a reply that starts with prefix,
// and returns that reply (see poll).
func pollReply(t *testing.T, what, prefix string, call func() error) error {
	t.Helper()
	var reply error
	poll(t, what, func() (bool, any) {
		reply = call()
		return reply != nil && strings.HasPrefix(reply.Error(), prefix), reply
	})
	return reply
}

// replyCases holds one case per row of the table.
func replyCases() []replyCase {
	ctx := context.Background()
	unfixable, transient := "unfixable", "transient"
	return []replyCase{
		{prefix: "NOAUTH ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers := passwordServer(t)
			return userClient(t, servers[0].Addr(), "", "").Get(ctx, "report").Err(), func(t *testing.T) {
				// A script call of at most 10 arguments meets it: Leader's
				// read (Acquire's has more: see the next row).
				_, err := dialAddr(t, servers[0].Addr()).Leader(ctx, "report")
				require.ErrorIs(t, err, redlock.ErrNoQuorum)
				require.ErrorIs(t, err, redlock.ErrMisconfigured, "%v", err)
				row := requireReplyOfRow(t, err, "NOAUTH ")
				assert.Contains(t, err.Error(), "node "+servers[0].Addr()+"/0 "+row.Fix)
				t.Logf("the lock's call failed at once: %v", err)
			}
		}},
		{prefix: "ERR Protocol error: unauthenticated", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers := passwordServer(t)
			// More than 10 arguments without the password; the server
			// closes the connection after its reply.
			args := []any{"DEL"}
			for i := range 11 {
				args = append(args, fmt.Sprint("k", i))
			}
			return userClient(t, servers[0].Addr(), "", "").Do(ctx, args...).Err(), func(t *testing.T) {
				// Acquire's script call has 13 arguments.
				requireAcquireRefused(t, acquireOnce(t, dialAddr(t, servers[0].Addr())), servers[0].Addr(), "ERR Protocol error: unauthenticated")
			}
		}},
		{prefix: "WRONGPASS ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers := passwordServer(t)
			return userClient(t, servers[0].Addr(), "", "").Do(ctx, "AUTH", "wrong").Err(), func(t *testing.T) {
				rl := dialServers(t, servers, func(a string) string { return "redis://:wrong@" + a })
				requireAcquireRefused(t, acquireOnce(t, rl), servers[0].Addr(), "WRONGPASS ")
			}
		}},
		{prefix: "NOPERM ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers, plain := startServersWith(t, 1, redisserver.Options{})
			require.NoError(t, plain[0].Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval").Err())
			return userClient(t, servers[0].Addr(), "locker", "pw").Do(ctx, "EVALSHA", anySha, 0).Err(), func(t *testing.T) {
				rl := dialServers(t, servers, func(a string) string { return "redis://locker:pw@" + a })
				requireAcquireRefused(t, acquireOnce(t, rl), servers[0].Addr(), "NOPERM ")
				requireACLFixWorks(t, servers, plain[0], "NOPERM ")
			}
		}},
		{prefix: "ERR The user executing the script ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// Redis 7.0 answers so, not NOPERM, when an ACL denies a
			// command that a script runs (7.2 answers NOPERM): an ACL user
			// allowed EVALSHA, but not SET.
			servers, plain := startServersWith(t, 1, redisserver.Options{})
			require.NoError(t, plain[0].Do(ctx, "ACL", "SETUSER", "locker", "on", ">pw", "~*", "&*", "+@all", "-set").Err())
			reply := userClient(t, servers[0].Addr(), "locker", "pw").Eval(ctx, "return redis.call('SET', KEYS[1], 'x')", []string{"report"}).Err()
			return reply, func(t *testing.T) {
				rl := dialServers(t, servers, func(a string) string { return "redis://locker:pw@" + a })
				requireAcquireRefused(t, acquireOnce(t, rl), servers[0].Addr(), "ERR The user executing the script ")
				requireACLFixWorks(t, servers, plain[0], "ERR The user executing the script ")
			}
		}},
		{prefix: "READONLY ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// A replica of server 0, killed first: the replica never
			// syncs (and loads) while the test runs.
			servers, plain := startServersWith(t, 2, redisserver.Options{})
			require.NoError(t, servers[0].Kill())
			require.NoError(t, plain[1].Do(ctx, "REPLICAOF", "127.0.0.1", servers[0].Port()).Err())
			return plain[1].Set(ctx, "report", "x", 0).Err(), func(t *testing.T) {
				requireAcquireRefused(t, acquireOnce(t, dialAddr(t, servers[1].Addr())), servers[1].Addr(), "READONLY ")
			}
		}},
		{prefix: "MOVED ", kind: unfixable, provoke: func(t *testing.T, cl *replyCluster) (error, func(*testing.T)) {
			// b answers MOVED once it has heard from a which slots a serves.
			reply := pollReply(t, "b joins a's cluster", "MOVED ", func() error { return cl.pb.Get(ctx, "report").Err() })
			return reply, func(t *testing.T) {
				requireAcquireRefused(t, acquireOnce(t, dialAddr(t, cl.b.Addr())), cl.b.Addr(), "MOVED ")
			}
		}},
		{prefix: "ASK ", kind: unfixable, provoke: func(t *testing.T, cl *replyCluster) (error, func(*testing.T)) {
			// A key that a does not hold, in a slot a is migrating.
			cl.serving(t)
			cl.migrating(t, "ask")
			return cl.pa.Get(ctx, "ask").Err(), func(t *testing.T) {
				rl := dialAddr(t, cl.a.Addr())
				lctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				_, err := rl.Acquire(lctx, "ask", 10*time.Second)
				requireAcquireRefused(t, err, cl.a.Addr(), "ASK ")
			}
		}},
		{prefix: "CROSSSLOT ", kind: unfixable, provoke: func(t *testing.T, cl *replyCluster) (error, func(*testing.T)) {
			// a checks the slots of a command's keys before anything else,
			// even while it says the cluster is down.
			return cl.pa.MGet(ctx, "a", "b").Err(), func(t *testing.T) {
				// A multi-key lock's script sets every key, each of its own
				// slot.
				rl := dialAddr(t, cl.a.Addr())
				lctx, cancel := context.WithTimeout(ctx, time.Minute)
				defer cancel()
				_, err := rl.AcquireMulti(lctx, []string{"a", "b"}, 10*time.Second)
				requireAcquireRefused(t, err, cl.a.Addr(), "CROSSSLOT ")
			}
		}},
		{prefix: "ERR unknown command", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers, plain := startServersWith(t, 1, redisserver.Options{Args: []string{"--rename-command", "EVALSHA", ""}})
			return plain[0].Do(ctx, "EVALSHA", anySha, 0).Err(), func(t *testing.T) {
				requireAcquireRefused(t, acquireOnce(t, dialAddr(t, servers[0].Addr())), servers[0].Addr(), "ERR unknown command")
			}
		}},
		{prefix: "ERR DB index is out of range", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// A URL's database number at or above the server's
			// "databases" (16 by default): every connection's SELECT fails.
			servers, plain := startServersWith(t, 1, redisserver.Options{})
			return plain[0].Do(ctx, "SELECT", 16).Err(), func(t *testing.T) {
				rl := dialServers(t, servers, func(a string) string { return "redis://" + a + "/16" })
				err := acquireOnce(t, rl)
				row := requireReplyOfRow(t, err, "ERR DB index is out of range")
				requireMisconfigured(t, err, "node "+servers[0].Addr()+"/16 "+row.Fix)
			}
		}},
		{prefix: "NOSCRIPT ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// No call of the library ends with this reply: it answers
			// NOSCRIPT with EVAL and the script's source, and a node
			// without EVAL answers that with "ERR unknown command" (the
			// row above).
			_, plain := startServersWith(t, 1, redisserver.Options{})
			return plain[0].Do(ctx, "EVALSHA", anySha, 0).Err(), nil
		}},
		{prefix: "WRONGTYPE ", kind: unfixable, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// A list under the name of lock "report"'s fencing counter.
			servers, plain := startServersWith(t, 1, redisserver.Options{})
			require.NoError(t, plain[0].RPush(ctx, "{report}:fence", "x").Err())
			return plain[0].Get(ctx, "{report}:fence").Err(), func(t *testing.T) {
				rl := dialAddr(t, servers[0].Addr())
				requireAcquireRefused(t, acquireOnce(t, rl), servers[0].Addr(), "WRONGTYPE ")
				// The reply is about one key: the node still answers.
				assert.Equal(t, redlock.HealthUp, rl.Health()[0].State)
			}
		}},

		{prefix: "LOADING ", kind: transient, provoke: provokeLoading},
		{prefix: "BUSY ", kind: transient, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// A script that runs past busy-reply-threshold (ms).
			servers, plain := startServersWith(t, 1, redisserver.Options{Args: []string{"--busy-reply-threshold", "50"}})
			blocker := redis.NewClient(&redis.Options{Addr: servers[0].Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: -1, ReadTimeout: -1})
			looping := make(chan error, 1)
			go func() { looping <- blocker.Eval(ctx, "while true do end", nil).Err() }()
			t.Cleanup(func() {
				// SCRIPT KILL is one of the few commands a busy node runs.
				for range 100 {
					_ = plain[0].ScriptKill(ctx).Err()
					select {
					case <-looping:
						_ = blocker.Close()
						return
					case <-time.After(50 * time.Millisecond):
					}
				}
				_ = blocker.Close() // ends its call if no kill came through
				<-looping
			})
			reply := pollReply(t, "the script runs", "BUSY ", func() error { return plain[0].Ping(ctx).Err() })
			return reply, func(t *testing.T) { requireRetried(t, servers[0].Addr(), "report", "BUSY ") }
		}},
		{prefix: "MASTERDOWN ", kind: transient, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// A replica that must not serve stale data, of a master that
			// is down: server 0, killed before server 1 replicates it, so
			// that it never syncs.
			servers, plain := startServersWith(t, 2, redisserver.Options{Args: []string{"--replica-serve-stale-data", "no"}})
			require.NoError(t, servers[0].Kill())
			require.NoError(t, plain[1].Do(ctx, "REPLICAOF", "127.0.0.1", servers[0].Port()).Err())
			return plain[1].Get(ctx, "report").Err(), func(t *testing.T) {
				requireRetried(t, servers[1].Addr(), "report", "MASTERDOWN ")
			}
		}},
		{prefix: "TRYAGAIN ", kind: transient, provoke: func(t *testing.T, cl *replyCluster) (error, func(*testing.T)) {
			// A command on several keys of a slot a is migrating, some of
			// which a holds: a lock released there leaves its fencing
			// counter and epoch behind, not its key.
			cl.serving(t)
			rl := dialAddr(t, cl.a.Addr())
			lctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			l, err := rl.Acquire(lctx, "tryagain", 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, l.Release(lctx))
			require.Zero(t, cl.pa.Exists(ctx, "tryagain").Val(), "the lock's key is gone")
			require.Equal(t, int64(1), cl.pa.Exists(ctx, "{tryagain}:fence").Val(), "its fencing counter is still there")
			cl.migrating(t, "tryagain")
			return cl.pa.MGet(ctx, "tryagain", "{tryagain}:fence").Err(), func(t *testing.T) {
				requireRetried(t, cl.a.Addr(), "tryagain", "TRYAGAIN ")
			}
		}},
		{prefix: "CLUSTERDOWN ", kind: transient, provoke: func(t *testing.T, cl *replyCluster) (error, func(*testing.T)) {
			// c serves no slot at all.
			return cl.pc.Get(ctx, "report").Err(), func(t *testing.T) {
				requireRetried(t, cl.c.Addr(), "report", "CLUSTERDOWN ")
			}
		}},
		{prefix: "OOM ", kind: transient, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers, plain := startServersWith(t, 1, redisserver.Options{Args: []string{"--maxmemory", "1", "--maxmemory-policy", "noeviction"}})
			return plain[0].Set(ctx, "report", "x", 0).Err(), func(t *testing.T) {
				requireRetried(t, servers[0].Addr(), "report", "OOM ")
			}
		}},
		{prefix: "MISCONF ", kind: transient, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			// A node that saves snapshots and whose last one failed: its
			// directory is gone.
			dir := filepath.Join(t.TempDir(), "data")
			require.NoError(t, os.Mkdir(dir, 0o700))
			servers, plain := startServersWith(t, 1, redisserver.Options{Dir: dir, Args: []string{"--save", "3600 1", "--stop-writes-on-bgsave-error", "yes"}})
			// Without this, SIGTERM would make the server save once more,
			// fail, and refuse to exit until Close's SIGKILL.
			t.Cleanup(func() { _ = plain[0].ConfigSet(ctx, "save", "").Err() })
			require.NoError(t, os.RemoveAll(dir))
			require.NoError(t, plain[0].BgSave(ctx).Err())
			poll(t, "the snapshot fails", func() (bool, any) {
				info, err := plain[0].Info(ctx, "persistence").Result()
				return strings.Contains(info, "rdb_bgsave_in_progress:0") && strings.Contains(info, "rdb_last_bgsave_status:err"), err
			})
			return plain[0].Set(ctx, "report", "x", 0).Err(), func(t *testing.T) {
				requireRetried(t, servers[0].Addr(), "report", "MISCONF ")
			}
		}},
		{prefix: "NOREPLICAS ", kind: transient, provoke: func(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
			servers, plain := startServersWith(t, 1, redisserver.Options{Args: []string{"--min-replicas-to-write", "1"}})
			return plain[0].Set(ctx, "report", "x", 0).Err(), func(t *testing.T) {
				requireRetried(t, servers[0].Addr(), "report", "NOREPLICAS ")
			}
		}},
	}
}

// provokeLoading restarts a server on a snapshot that takes seconds to
// load: key-load-delay sleeps that many microseconds per key, and a small
// loading-process-events-interval-bytes makes the server answer (LOADING)
// while it loads instead of leaving its clients waiting.
func provokeLoading(t *testing.T, _ *replyCluster) (error, func(*testing.T)) {
	ctx := context.Background()
	servers, plain := startServersWith(t, 1, redisserver.Options{
		Args:         []string{"--key-load-delay", "1500", "--loading-process-events-interval-bytes", "1024"},
		StartTimeout: 30 * time.Second, // Restart waits for the load to end
	})
	s, addr := servers[0], servers[0].Addr()
	require.NoError(t, plain[0].Eval(ctx, "for i = 1, 4000 do redis.call('SET', 'k' .. i, 'v') end return 1", nil).Err())
	require.NoError(t, plain[0].Save(ctx).Err())
	restarted := make(chan error, 1)
	go func() { restarted <- s.Restart(ctx) }()
	waitRestart := sync.OnceValue(func() error { return <-restarted })
	t.Cleanup(func() { _ = waitRestart() }) // Close waits for Restart anyway
	// A fresh connection per probe: a go-redis pool whose dial failed (the
	// server was not listening again yet) keeps failing for a while.
	reply := pollReply(t, "the server loads its snapshot", "LOADING ", func() error {
		c := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1})
		defer func() { _ = c.Close() }()
		return c.Get(ctx, "k1").Err()
	})
	return reply, func(t *testing.T) {
		// Acquire goes on while the node loads (4,000 keys at 1.5 ms: 6 s,
		// room for a loaded machine's stall before its first attempt), and
		// takes the lock once the node has loaded.
		var log attemptLog
		rl := dialAddr(t, addr, redlock.WithObserver(&log))
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		l, err := rl.Acquire(lctx, "report", 10*time.Second, redlock.WithRetry(redlock.LinearRetry(20*time.Millisecond, 0, 0)))
		require.NoError(t, err)
		assert.NoError(t, l.Release(lctx))
		require.NoError(t, waitRestart())
		attempts := log.all()
		require.Greater(t, len(attempts), 1, "retried")
		for i, e := range attempts[:len(attempts)-1] {
			require.Len(t, e.Nodes, 1)
			requireReplyOfRow(t, e.Nodes[0].Err, "LOADING ", "attempt %d", i+1)
		}
		t.Logf("the lock's call retried %d times on: %v", len(attempts)-1, attempts[0].Nodes[0].Err)
	}
}
