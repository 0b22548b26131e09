package redlock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// requireMultiHeld requires every node to hold every key with owner.
func (c *cluster) requireMultiHeld(t testing.TB, owner string, keys ...string) {
	t.Helper()
	for i, n := range c.nodes {
		for _, k := range keys {
			require.Equal(t, owner, n.Value(k), "node %d, key %q", i, k)
		}
	}
}

// The lock sets every key on every node, gives each key its own token, and
// Release deletes them all.
func TestAcquireMulti_SetsAndReleasesEveryKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 5)
		ctx := context.Background()
		single := c.acquire(t, ctx, "b", 10*time.Second)
		require.NoError(t, single.Release(ctx))
		synctest.Wait()

		m, err := c.rl.AcquireMulti(ctx, []string{"a", "b", "c"}, 10*time.Second)
		require.NoError(t, err)
		synctest.Wait()
		c.requireMultiHeld(t, m.Owner(), "a", "b", "c")
		assert.Equal(t, []string{"a", "b", "c"}, m.Keys())
		assert.Positive(t, m.Validity())
		tb, ok := m.Token("b")
		require.True(t, ok)
		assert.Greater(t, tb, single.Token(), "b's token follows its single-key holder's")
		_, ok = m.Token("d")
		assert.False(t, ok)
		assert.Len(t, m.Tokens(), 3)

		require.NoError(t, m.Release(ctx))
		assert.LessOrEqual(t, m.Validity(), time.Duration(0))
		for _, k := range []string{"a", "b", "c"} {
			c.requireGone(t, k)
		}
		// The next single-key holder of c gets a higher token.
		l := c.acquire(t, ctx, "c", 10*time.Second)
		tc, _ := m.Token("c")
		assert.Greater(t, l.Token(), tc)
		c.releaseAndRequireGone(t, ctx, l, "c")
		require.ErrorIs(t, m.Release(ctx), redlock.ErrNotHeld, "a second Release")
	})
}

// One held key makes the whole lock fail on every node, leaves none of the
// other keys behind, and the error names the key, the nodes and the holder.
func TestAcquireMulti_AllOrNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 5)
		ctx := context.Background()
		c.holdElsewhere(t, "b", time.Minute, 0, 1, 2)

		_, err := c.rl.TryAcquireMulti(ctx, []string{"a", "b", "c"}, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.ErrorIs(t, err, redlock.ErrTaken)
		var kt *redlock.KeysTakenError
		require.ErrorAs(t, err, &kt)
		require.Len(t, kt.Keys, 1)
		assert.Equal(t, "b", kt.Keys[0].Key)
		require.NotEmpty(t, kt.Keys[0].Holders)
		for _, h := range kt.Keys[0].Holders {
			assert.Equal(t, "someone-", h.Holder, "the first 8 bytes of the owner value")
		}
		assert.Contains(t, err.Error(), `"b" on`)
		synctest.Wait()
		c.requireGone(t, "a")
		c.requireGone(t, "c")
		for i := 3; i < 5; i++ {
			assert.False(t, c.nodes[i].Has("b"), "node %d: b was free there, and must be left free", i)
		}
	})
}

// Overlapping multi-key locks and single-key locks exclude each other, in
// whatever order they name their keys. The nodes answer INFO, as
// redis-servers do, so their incarnations are verified: {c, b} right after
// ab.Release, whose delete on one node may still be on its way (Release
// returns at a majority), is granted by the other two although c is new
// there (TestIncarnation_VerifiedNodesGrantFreshMultiAndReadLocks holds
// that delete back on purpose). With nodes whose incarnation is unknown the
// per-key rule decides, and it counts that node's "taken" as history.
func TestAcquireMulti_OverlapsExclude(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, _ := incCluster(t, 3, "noeviction")
		ctx := context.Background()
		ab, err := c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err)

		_, err = c.rl.TryAcquireMulti(ctx, []string{"c", "b"}, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken)
		_, err = c.rl.TryAcquire(ctx, "a", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken)
		synctest.Wait()
		c.requireGone(t, "c")

		require.NoError(t, ab.Release(ctx))
		cb, err := c.rl.TryAcquireMulti(ctx, []string{"c", "b"}, 10*time.Second)
		require.NoError(t, err)
		a := c.tryAcquire(t, ctx, "a", 10*time.Second)
		require.NoError(t, cb.Release(ctx))
		require.NoError(t, a.Release(ctx))
		for _, k := range []string{"a", "b", "c"} {
			c.requireGone(t, k)
		}
	})
}

// A waiting AcquireMulti takes the keys once their holder releases them.
func TestAcquireMulti_WaitsForTheHolder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		b := c.acquire(t, ctx, "b", 10*time.Second)
		got := make(chan error, 1)
		go func() {
			m, err := c.rl.AcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
			if err == nil {
				err = m.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		select {
		case err := <-got:
			t.Fatalf("acquired while b was held: %v", err)
		default:
		}
		require.NoError(t, b.Release(ctx))
		require.NoError(t, <-got)
		c.requireGone(t, "a")
		c.requireGone(t, "b")
	})
}

// The schedule TestMultiLockInvariants shrank to: a multi-key lock {b,c}
// is released while another Client's AcquireMulti {a,b} waits for b. The
// release tells b's waiter and must still delete c: no key is left after
// every lock was released.
func TestAcquireMulti_ReleaseWithAWaiterDeletesEveryKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3, noGuard)
		other := c.secondClient(t, noGuard)
		ctx := context.Background()
		m, err := c.rl.TryAcquireMulti(ctx, []string{"b", "c"}, 3*time.Second)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			m, err := other.AcquireMulti(ctx, []string{"a", "b"}, 3*time.Second)
			if err == nil {
				err = m.Release(ctx)
			}
			got <- err
		}()
		time.Sleep(100 * time.Millisecond) // the waiter subscribes to b's releases
		synctest.Wait()
		require.NoError(t, m.Release(ctx))
		require.NoError(t, <-got)
		for _, k := range []string{"a", "b", "c"} {
			c.requireGone(t, k)
		}
	})
}

// A failed attempt's clean-up tells no waiter: it deletes keys nobody
// held. Here every attempt fails the same way (two nodes lost the keys'
// history, so the amnesia guard counts one grant of three) after every node
// set the keys; a clean-up that told the longest waiter would wake this
// very call on a majority, and it would retry at once, forever, with no
// retry delay. The schedule TestMultiLockInvariants found.
func TestAcquireMulti_CleanUpWakesNoWaiter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		m, err := c.rl.AcquireMulti(ctx, []string{"a", "b"}, time.Second)
		require.NoError(t, err)
		require.NoError(t, m.Release(ctx))
		synctest.Wait()
		c.nodes[0].m.FlushAll()
		c.nodes[1].m.FlushAll()

		every100ms := redlock.RetryFunc(func(attempt int) (time.Duration, bool) { return 100 * time.Millisecond, attempt < 1000 })
		// The deadline falls between two attempts (at 1.0 s and 1.1 s), so
		// the error reports a whole attempt, not one the deadline cut short.
		actx, cancel := context.WithTimeout(ctx, 1050*time.Millisecond)
		defer cancel()
		_, err = c.rl.AcquireMulti(actx, []string{"a", "b"}, time.Second, redlock.WithRetry(every100ms))
		qe := quorumError(t, err)
		assert.LessOrEqual(t, qe.Attempts, 11, "one attempt per retry delay in the second")
		assert.Contains(t, outcomes(qe.Nodes), redlock.OutcomeQuarantined)
		synctest.Wait()
		c.requireNoKey(t, "a")
		c.requireNoKey(t, "b")
	})
}

// A cancelled wait leaves no key behind and reports the context's error.
func TestAcquireMulti_CancelLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		b := c.acquire(t, ctx, "b", 10*time.Second)
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := c.rl.AcquireMulti(cctx, []string{"a", "b"}, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		c.requireGone(t, "a")
		require.NoError(t, b.Release(ctx))
	})
}

// Extend extends every key, KeepAlive keeps them past their TTL, and a
// node that lost one key no longer counts for an extension.
func TestAcquireMulti_ExtendAndKeepAlive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		m, err := c.rl.AcquireMulti(ctx, []string{"a", "b"}, time.Second)
		require.NoError(t, err)
		m2, err := m.Extend(ctx, 5*time.Second)
		require.NoError(t, err)
		assert.True(t, m2.ValidUntil().After(m.ValidUntil()))
		assert.Equal(t, m.Tokens(), m2.Tokens())

		lease, err := m2.KeepAlive(ctx)
		require.NoError(t, err)
		time.Sleep(20 * time.Second)
		require.NoError(t, lease.Err())
		c.requireMultiHeld(t, m.Owner(), "a", "b")
		require.NoError(t, lease.Release(ctx))
		c.requireGone(t, "a")
		c.requireGone(t, "b")

		// All or none on each node: with b gone on two of three nodes, no
		// majority holds both keys.
		m, err = c.rl.AcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err)
		synctest.Wait()
		c.nodes[0].m.Del("b")
		c.nodes[1].m.Del("b")
		_, err = m.Extend(ctx, 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.Equal(t, 10*time.Second, c.nodes[0].m.TTL("a"), "a node without every key extends none")
		require.ErrorIs(t, m.Release(ctx), redlock.ErrNotHeld)
		c.requireGone(t, "a")
	})
}

func TestAcquireMulti_BadInput(t *testing.T) {
	rl, err := redlock.Dial([]string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})
	require.NoError(t, err)
	defer rl.Close()
	ctx := context.Background()
	many := make([]string, redlock.MaxMultiKeys+1)
	for i := range many {
		many[i] = strings.Repeat("k", i+1)
	}
	for name, tc := range map[string]struct {
		keys []string
		ttl  time.Duration
		opts []redlock.Option
	}{
		"no keys":    {nil, time.Second, nil},
		"empty key":  {[]string{"a", ""}, time.Second, nil},
		"duplicate":  {[]string{"a", "b", "a"}, time.Second, nil},
		"too many":   {many, time.Second, nil},
		"long key":   {[]string{strings.Repeat("x", redlock.MaxKeyLen+1)}, time.Second, nil},
		"short ttl":  {[]string{"a", "b"}, time.Millisecond, nil},
		"min hold":   {[]string{"a", "b"}, time.Second, []redlock.Option{redlock.WithMinHold(time.Millisecond)}},
		"bad brace":  {[]string{"a", "b}c"}, time.Second, nil},
		"bad option": {[]string{"a"}, time.Second, []redlock.Option{redlock.WithNodeTimeout(-1)}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := rl.TryAcquireMulti(ctx, tc.keys, tc.ttl, tc.opts...)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		})
	}
	require.NoError(t, rl.Close())
	_, err = rl.AcquireMulti(ctx, []string{"a", "b"}, time.Second)
	require.ErrorIs(t, err, redlock.ErrClosed)
}

// On a Redis Cluster node, keys in different hash slots are refused before
// any node is contacted, with an error that shows how to use a hash tag.
func TestAcquireMulti_ClusterNeedsOneSlot(t *testing.T) {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer cc.Close()
	rl, err := redlock.New([]redis.UniversalClient{cc})
	require.NoError(t, err)
	defer rl.Close()
	ctx := context.Background()
	_, err = rl.TryAcquireMulti(ctx, []string{"alice", "bob"}, time.Second)
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.Contains(t, err.Error(), "hash tag")
	assert.Contains(t, err.Error(), "{accounts}:alice")

	// One tag: the check passes, and the (unreachable) node answers.
	_, err = rl.TryAcquireMulti(ctx, []string{"{accounts}:alice", "{accounts}:bob"}, time.Second)
	require.Error(t, err)
	require.False(t, errors.Is(err, redlock.ErrInvalidArgument), "%v", err)
}

// With the amnesia guard, a key's first use leaves every node's epoch to
// be vouched for; a Release that overtakes that vouching vouches where it
// deletes, so the next acquisition of the keys is not held up by
// quarantined nodes. A key used before and a new one are locked together at
// once: the first-use rule applies per key.
func TestAcquireMulti_GuardPerKeyAndReleaseVouches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 5, redlock.WithQuarantine(time.Minute))
		ctx := context.Background()
		c.useKey(t, "a")
		for i := range 3 {
			c.nodes[i].SlowScripts(time.Second, "multi-fence")
		}
		m, err := c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err, "a is trusted everywhere, b is new everywhere")
		require.NoError(t, m.Release(ctx))
		synctest.Wait()
		for i := range 3 {
			c.nodes[i].SlowScripts(0)
		}
		m, err = c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err, "the release vouched for b where the vouching came too late")
		require.NoError(t, m.Release(ctx))
		c.requireGone(t, "b")
	})
}

// A node that lost its data does not count for the keys it forgot, as for
// the lock: A holds the keys on nodes 0-2 only, node 0 loses its data, and
// B, which nodes 3 and 4 (trusted, free) and node 0 would grant, must not
// win. Without the guard it does: the limit the guard exists for.
func TestAcquireMulti_AmnesiaGuard(t *testing.T) {
	for _, guard := range []bool{true, false} {
		t.Run(map[bool]string{true: "guard", false: "no guard"}[guard], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				opt := redlock.WithQuarantine(time.Minute)
				if !guard {
					opt = redlock.WithoutAmnesiaGuard()
				}
				c := newCluster(t, 5, opt)
				ctx := context.Background()
				c.useKey(t, "a")
				c.useKey(t, "b")
				c.nodes[3].Refuse()
				c.nodes[4].Refuse()
				m, err := c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
				require.NoError(t, err)
				synctest.Wait()
				c.nodes[3].Revive(t)
				c.nodes[4].Revive(t)
				c.nodes[0].m.FlushAll()
				b, err := c.rl.TryAcquireMulti(ctx, []string{"b", "a"}, 10*time.Second)
				if !guard {
					require.NoError(t, err, "without the guard B wins while A holds the keys")
					require.NoError(t, b.Release(ctx))
					return
				}
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				qe := quorumError(t, err)
				assert.Equal(t, redlock.OutcomeQuarantined, qe.Nodes[0].Outcome)
				assert.LessOrEqual(t, qe.Granted, 2, "nodes 3 and 4 at most")
				assert.Positive(t, m.Validity())
			})
		})
	}
}

// The partial-grant mutant (chaos/mutant.go: multi-partial-grant), a node
// that sets the free keys of a set whose other keys are held, gives two
// holders of one key: the check the tests above and the chaos harness make
// must see it. Here, on the wire as the harness does it, deterministically.
func TestAcquireMulti_PartialGrantMutantBreaksExclusion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		mutated, err := mutation.Compile([]mutation.Rewrite{{Script: "multi-acquire", Old: "if #held > 0 then", New: "if #held >= 2 * k then"}})
		require.NoError(t, err)
		c := newCluster(t, 3, noGuard)
		for _, n := range c.nodes {
			n.rc.AddHook(mutation.ScriptHook(mutated))
		}
		ctx := context.Background()
		ab, err := c.rl.TryAcquireMulti(ctx, []string{"a", "b"}, 10*time.Second)
		require.NoError(t, err)
		cb, err := c.rl.TryAcquireMulti(ctx, []string{"c", "b"}, 10*time.Second)
		require.NoError(t, err, "the mutant grants {c, b} while b is held")
		assert.Positive(t, ab.Validity())
		assert.Positive(t, cb.Validity())
		_ = cb.Release(ctx)
		_ = ab.Release(ctx)
	})
}
