package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
)

// The tests in this file run in testing/synctest bubbles: "time" is the
// bubble's fake clock, so a test that holds a lock for many TTLs takes
// milliseconds, and instants can be compared exactly. A bubble also fails
// the test if any goroutine it started is still blocked when it ends, which
// is how these tests check that Do and Lease leave no goroutine behind.

// eventLog records the Events an Observer receives.
type eventLog struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (r *eventLog) Observe(e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

// count returns how many events of op were recorded, and how many of them OK.
func (r *eventLog) count(op redlock.Op) (all, ok int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		if e.Op == op {
			all++
			if e.OK {
				ok++
			}
		}
	}
	return all, ok
}

func (r *eventLog) last(op redlock.Op) (redlock.Event, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := len(r.events) - 1; i >= 0; i-- {
		if r.events[i].Op == op {
			return r.events[i], true
		}
	}
	return redlock.Event{}, false
}

func TestDo_AutoExtensionKeepsLockForManyTTLs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		const ttl = time.Second
		start := time.Now()
		err := c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, _ *redlock.Lease) error {
			// 30 TTLs of work, checking all along that the lock is held.
			for range 300 {
				time.Sleep(100 * time.Millisecond)
				if err := ctx.Err(); err != nil {
					return err
				}
				if n := c.holders("job"); n != 3 {
					t.Errorf("at %v: %d nodes hold the key, want 3", time.Since(start), n)
				}
			}
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, 30*time.Second, time.Since(start), "Do returns as soon as fn does")
		c.requireGone(t, "job") // a straggling grant is undone in the background

		exts, extOK := ev.count(redlock.OpExtend)
		assert.Equal(t, exts, extOK, "no extension failed")
		// One extension every ttl/3 for 30 s.
		assert.InDelta(t, 90, exts, 1)
		_, relOK := ev.count(redlock.OpRelease)
		assert.Equal(t, 1, relOK)
	})
}

// leakCheck runs goleak outside a synctest bubble, for a test inside one.
// goleak retries for about half a second before it reports a goroutine, and
// a check made inside the bubble would sleep on the bubble's fake clock,
// letting every straggler finish first. Asked from inside the bubble, the
// check runs in real time while the asking goroutine waits on a channel made
// outside the bubble: the bubble is then not durably blocked, so its clock
// stands still and the check sees exactly what was running when it was
// asked. Make it outside the bubble.
type leakCheck struct {
	ask    chan []goleak.Option
	answer chan error
}

func newLeakCheck(t *testing.T) *leakCheck {
	lc := &leakCheck{ask: make(chan []goleak.Option), answer: make(chan error)}
	go func() {
		for opts := range lc.ask {
			lc.answer <- goleak.Find(opts...)
		}
	}()
	t.Cleanup(func() { close(lc.ask) })
	return lc
}

// verifyNone fails the test if a goroutine is alive now that the options
// do not ignore (goleak.IgnoreCurrent: those running when it was made). The in-process nodes'
// per-connection goroutines (miniredis's and serverConn's) are not counted: go-redis keeps connections
// open in its pool.
func (lc *leakCheck) verifyNone(t *testing.T, base ...goleak.Option) {
	t.Helper()
	const peer = "github.com/alicebob/miniredis/v2/server.(*Server).servePeer"
	const out = "github.com/d3b93e30/redlock_test.(*serverConn).copyOut" // the test pipe's server end (helpers_test.go)
	lc.ask <- append([]goleak.Option{goleak.IgnoreAnyFunction(peer), goleak.IgnoreAnyFunction(peer + ".func2"), goleak.IgnoreAnyFunction(out)}, base...)
	require.NoError(t, <-lc.answer, "goroutines left running")
}

// Do decides at a majority, as Acquire and Release do: a slow node costs it
// nothing. Its calls to that node end in the background, tracked by the
// Client: once Close returns, no goroutine and no key is left.
func TestDo_DoesNotWaitForASlowNode(t *testing.T) {
	lc := newLeakCheck(t)
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3, noGuard)
		c.nodes[2].SlowAcquire(50 * time.Millisecond)
		base := goleak.IgnoreCurrent()
		start := time.Now()
		err := c.rl.Do(context.Background(), "job", ttl10s, func(context.Context, *redlock.Lease) error { return nil })
		require.NoError(t, err)
		assert.Zero(t, time.Since(start), "Do did not wait for the slow node")
		require.NoError(t, c.rl.Close())
		assert.Equal(t, 50*time.Millisecond, time.Since(start), "Close waited for the slow node's calls")
		lc.verifyNone(t, base)
		c.requireNoKey(t, "job")
	})
}

func TestDo_MajorityKilledCancelsBeforeValidityDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		const ttl = 3 * time.Second
		var (
			deadline, canceledAt time.Time
			fnErr                error
		)
		start := time.Now()
		err := c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, _ *redlock.Lease) error {
			time.Sleep(500 * time.Millisecond)
			// The lock's current handle, through reentrancy: no round trip.
			l := c.acquire(t, ctx, "job", ttl)
			deadline = l.ValidUntil()
			c.nodes[0].Refuse()
			c.nodes[1].Refuse()
			<-ctx.Done()
			canceledAt = time.Now()
			fnErr = ctx.Err()
			return fnErr
		})
		assert.True(t, canceledAt.Before(deadline), "context canceled at %v, validity deadline %v", canceledAt.Sub(start), deadline.Sub(start))
		assert.Equal(t, ttl/3, canceledAt.Sub(start), "canceled by the first extension after the kill")

		require.Error(t, err)
		assert.ErrorIs(t, err, redlock.ErrLockLost)
		assert.ErrorIs(t, err, redlock.ErrNoQuorum, "the failed extension's cause")
		assert.ErrorIs(t, err, fnErr, "fn's error is wrapped too")
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		assert.Equal(t, redlock.OpExtend, qe.Op)
		assert.Equal(t, redlock.OutcomeUnreachable, qe.Nodes[0].Outcome)
		assert.Equal(t, redlock.OutcomeUnreachable, qe.Nodes[1].Outcome)
		settleDials()
	})
}

func TestDo_ValidityRunsOutWhileExtensionHangs(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newWarmCluster(t, 3, redlock.WithNodeTimeout(500*time.Millisecond))
		const ttl = time.Second
		var deadline, canceledAt time.Time
		var cause error
		err := c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, _ *redlock.Lease) error {
			l := c.acquire(t, ctx, "job", ttl)
			deadline = l.ValidUntil()
			for _, n := range c.nodes {
				n.Slow(10 * time.Second)
			}
			<-ctx.Done()
			canceledAt = time.Now()
			cause = context.Cause(ctx)
			return nil
		}, redlock.WithExtendInterval(900*time.Millisecond))
		// The extension started at 900 ms and would time out at 1.4 s; the
		// context must end at the validity deadline, not after.
		assert.Equal(t, deadline, canceledAt)
		assert.ErrorIs(t, cause, redlock.ErrLockLost)
		assert.Contains(t, cause.Error(), "validity ran out")
		assert.ErrorIs(t, err, redlock.ErrLockLost, "fn returned nil, but the lock was lost while it ran")
	})
}

func TestDo_LockTakenIsLostWithNotHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		err := c.rl.Do(context.Background(), "job", time.Second, func(ctx context.Context, _ *redlock.Lease) error {
			// Someone else's value replaces ours everywhere (as after an
			// expiry and a new holder).
			for _, n := range c.nodes {
				require.NoError(t, n.m.Set("job", "thief"))
			}
			<-ctx.Done()
			return errors.New("work interrupted")
		})
		assert.ErrorIs(t, err, redlock.ErrLockLost)
		assert.ErrorIs(t, err, redlock.ErrNotHeld)
		assert.ErrorContains(t, err, "work interrupted")
		for i, n := range c.nodes {
			assert.Equal(t, "thief", n.Value("job"), "node %d: release is owner-checked", i)
		}
	})
}

func TestDo_Errors(t *testing.T) {
	ctx := context.Background()
	t.Run("nil fn", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			assert.ErrorIs(t, c.rl.Do(ctx, "job", time.Second, nil), redlock.ErrInvalidArgument)
		})
	})
	t.Run("interval not below validity, before any round trip", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ev := &eventLog{}
			c := newCluster(t, 3, redlock.WithObserver(ev))
			ran := false
			err := c.rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { ran = true; return nil },
				redlock.WithExtendInterval(time.Second))
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.False(t, ran)
			n, _ := ev.count(redlock.OpAcquire)
			assert.Zero(t, n)
			assert.ErrorIs(t, c.rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { return nil },
				redlock.WithExtendInterval(-time.Second)), redlock.ErrInvalidArgument)
			assert.ErrorIs(t, c.rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { return nil },
				redlock.WithMaxHold(-time.Second)), redlock.ErrInvalidArgument)
			assert.ErrorIs(t, c.rl.Do(ctx, "job", time.Millisecond, func(context.Context, *redlock.Lease) error { return nil }),
				redlock.ErrInvalidArgument)
		})
	})
	t.Run("busy: fn does not run", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			c.holdElsewhere(t, "job", time.Minute, 0, 1, 2)
			ran := false
			err := c.rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { ran = true; return nil },
				redlock.WithRetry(redlock.NoRetry()))
			assert.ErrorIs(t, err, redlock.ErrNotAcquired)
			assert.False(t, ran)
		})
	})
	t.Run("fn's error is returned and the lock released", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			errWork := errors.New("work failed")
			err := c.rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { return errWork })
			assert.Equal(t, errWork, err)
			c.requireGone(t, "job") // a straggling grant is undone in the background
		})
	})
	t.Run("panic propagates after the release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			func() {
				defer func() { assert.Equal(t, "boom", recover()) }()
				_ = c.rl.Do(ctx, "job", time.Second, func(context.Context, *redlock.Lease) error { panic("boom") })
				t.Error("Do returned instead of panicking")
			}()
			c.requireGone(t, "job") // a straggling grant is undone in the background
		})
	})
	t.Run("caller's cancellation is not a lost lock", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			parent, cancel := context.WithCancel(ctx)
			err := c.rl.Do(parent, "job", time.Second, func(ctx context.Context, _ *redlock.Lease) error {
				time.Sleep(2 * time.Second)
				cancel()
				<-ctx.Done()
				return ctx.Err()
			})
			assert.Equal(t, context.Canceled, err)
			assert.NotErrorIs(t, err, redlock.ErrLockLost)
			c.requireGone(t, "job") // a straggling grant is undone in the background
		})
	})
	t.Run("maximum hold time", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			start := time.Now()
			var endedAt time.Time
			err := c.rl.Do(ctx, "job", time.Second, func(ctx context.Context, _ *redlock.Lease) error {
				<-ctx.Done()
				endedAt = time.Now()
				return ctx.Err()
			}, redlock.WithMaxHold(2500*time.Millisecond))
			assert.Equal(t, 2500*time.Millisecond, endedAt.Sub(start))
			assert.ErrorIs(t, err, redlock.ErrHoldLimit)
			assert.NotErrorIs(t, err, redlock.ErrLockLost)
			c.requireGone(t, "job") // a straggling grant is undone in the background
		})
	})
}

func TestKeepAlive_ReleaseStopsLease(t *testing.T) {
	ctx := context.Background()
	t.Run("Lease.Release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			l := c.acquire(t, ctx, "job", time.Second)
			lease, err := l.KeepAlive(ctx)
			require.NoError(t, err)
			_, err = l.KeepAlive(ctx)
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "one Lease per lock")

			time.Sleep(5 * time.Second)
			require.NoError(t, lease.Err())
			latest := lease.Lock()
			assert.True(t, latest.ValidUntil().After(l.ValidUntil()), "the Lease has extended the lock")
			assert.Positive(t, latest.Validity())
			assert.Equal(t, l.Token(), latest.Token())

			require.NoError(t, lease.Release(ctx))
			assert.ErrorIs(t, lease.Err(), context.Canceled)
			assert.NotErrorIs(t, lease.Err(), redlock.ErrLockLost)
			assert.NoError(t, lease.Release(ctx), "Release is idempotent")
			c.requireGone(t, "job") // a straggling grant is undone in the background
		})
	})
	t.Run("Lock.Release", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ev := &eventLog{}
			c := newCluster(t, 3, redlock.WithObserver(ev))
			l := c.acquire(t, ctx, "job", time.Second)
			lease, err := l.KeepAlive(ctx)
			require.NoError(t, err)
			time.Sleep(2 * time.Second)
			// The original handle: its own deadline has passed, but it is
			// the same lock, and releasing it stops the Lease.
			require.NoError(t, l.Release(ctx))
			select {
			case <-lease.Done():
			default:
				t.Fatal("releasing the lock did not end the Lease's context")
			}
			assert.ErrorIs(t, lease.Err(), context.Canceled)
			c.requireGone(t, "job") // a straggling grant is undone in the background
			time.Sleep(5 * time.Second)
			n, _ := ev.count(redlock.OpExtend)
			assert.Equal(t, 6, n, "extensions at 1/3, 2/3, ... of each TTL until the release, none after")
			lost, _ := ev.count(redlock.OpLost)
			assert.Zero(t, lost)
		})
	})
	t.Run("bad interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c := newCluster(t, 3)
			l := c.acquire(t, ctx, "job", time.Second)
			_, err := l.KeepAlive(ctx, redlock.WithExtendInterval(990*time.Millisecond))
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "validity is 1 s − 12 ms")
			require.NoError(t, l.Release(ctx))
		})
	})
}

func TestAcquire_ReentrantThroughContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		ctx := context.Background()
		err := c.rl.Do(ctx, "job", time.Second, func(ctx context.Context, _ *redlock.Lease) error {
			outer := c.acquire(t, ctx, "job", time.Minute)
			assert.Zero(t, outer.Attempts(), "nested handle")
			assert.Equal(t, time.Second, outer.TTL(), "the holder's TTL, not the nested call's")

			// Nested Do on the same key: runs at once, releases nothing.
			ran := false
			require.NoError(t, c.rl.Do(ctx, "job", time.Second, func(inner context.Context, _ *redlock.Lease) error {
				ran = true
				l, err := c.rl.TryAcquire(inner, "job", time.Second)
				require.NoError(t, err)
				assert.Equal(t, outer.Owner(), l.Owner())
				assert.Equal(t, outer.Token(), l.Token())
				return l.Release(inner)
			}))
			assert.True(t, ran)
			synctest.Wait() // the acquisition's straggler
			assert.Equal(t, 3, c.holders("job"), "nested releases leave the lock in place")
			require.NoError(t, outer.Release(ctx))
			assert.Equal(t, 3, c.holders("job"))

			// Another context, or another client, is an ordinary contender.
			_, err := c.rl.TryAcquire(context.Background(), "job", time.Second)
			assert.ErrorIs(t, err, redlock.ErrNotAcquired)
			other, err := redlock.New(clientsOf(c))
			require.NoError(t, err)
			defer other.Close()
			_, err = other.TryAcquire(ctx, "job", time.Second)
			assert.ErrorIs(t, err, redlock.ErrNotAcquired)

			// Another key with the same context is a separate lock.
			l2 := c.tryAcquire(t, ctx, "other-job", time.Second)
			assert.Equal(t, 1, l2.Attempts())
			return l2.Release(ctx)
		})
		require.NoError(t, err)
		c.requireGone(t, "job") // a straggling grant is undone in the background
		acq, _ := ev.count(redlock.OpAcquire)
		assert.Equal(t, 3, acq, "Do, the contender on this client and other-job; none for the nested calls")
	})
}

func TestAcquire_ReentrantAfterLeaseEnded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		ctx := context.Background()
		l := c.acquire(t, ctx, "job", time.Second)
		lease, err := l.KeepAlive(ctx)
		require.NoError(t, err)
		held := lease.Context()
		require.NoError(t, lease.Release(ctx))
		_, err = c.rl.Acquire(held, "job", time.Second)
		assert.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.ErrorIs(t, err, context.Canceled)
	})
}

func TestObserve_LogsWithoutSecrets(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf bytes.Buffer
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithLogger(logger), redlock.WithObserver(ev))
		var owner string
		err := c.rl.Do(context.Background(), "job", time.Second, func(ctx context.Context, _ *redlock.Lease) error {
			l := c.acquire(t, ctx, "job", time.Second)
			owner = l.Owner()
			time.Sleep(time.Second) // a few extensions
			c.nodes[0].Refuse()
			c.nodes[1].Refuse()
			<-ctx.Done()
			return nil
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)

		mu.Lock()
		out := buf.String()
		mu.Unlock()
		require.NotEmpty(t, owner)
		assert.NotContains(t, out, owner, "the owner value is a secret")
		assert.Contains(t, out, `level=DEBUG msg="redlock: acquire"`)
		assert.Regexp(t, `nodes="127.0.0.1:7001/0=\S+ 127.0.0.1:7002/0=\S+ 127.0.0.1:7003/0=`, out, "per-node outcomes")
		assert.Contains(t, out, `level=DEBUG msg="redlock: extend"`)
		assert.Contains(t, out, `level=WARN msg="redlock: extend failed"`)
		assert.Contains(t, out, `level=WARN msg="redlock: lock lost"`)
		assert.Contains(t, out, `level=WARN msg="redlock: release failed"`)

		a, ok := ev.last(redlock.OpAcquire)
		require.True(t, ok)
		assert.True(t, a.OK)
		assert.Equal(t, 2, a.Quorum)
		assert.Equal(t, redlock.Drift(time.Second, redlock.DefaultDriftFactor), a.Drift)
		assert.Equal(t, time.Second-a.Drift, a.Validity, "no time passes in the bubble")
		lost, ok := ev.last(redlock.OpLost)
		require.True(t, ok)
		assert.ErrorIs(t, lost.Err, redlock.ErrLockLost)
		ext, ok := ev.last(redlock.OpExtend)
		require.True(t, ok)
		assert.False(t, ext.OK)
		assert.ErrorIs(t, ext.Err, redlock.ErrNoQuorum)
		settleDials()
	})
}

// settleDials lets go-redis finish the dial retries it runs in the
// background for a refused node (5 attempts, 100 ms apart), which outlive the
// call that started them: a bubble must end with no goroutine left.
func settleDials() { time.Sleep(time.Second) }

// lockedWriter serializes writes to a buffer shared between goroutines.
type lockedWriter struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// clientsOf returns the go-redis clients of a test cluster's nodes.
func clientsOf(c *cluster) []redis.UniversalClient {
	out := make([]redis.UniversalClient, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.rc
	}
	return out
}

func TestInspect(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		states, err := c.rl.Inspect(ctx, "job")
		require.NoError(t, err)
		for _, st := range states {
			assert.Equal(t, redlock.NodeState{Node: st.Node, EpochAge: -1}, st, "free, no fencing counter or epoch yet")
		}

		l := c.acquireSettled(t, ctx, "job", 10*time.Second)
		time.Sleep(time.Second)
		c.nodes[2].Refuse()
		states, err = c.rl.Inspect(ctx, "job")
		require.NoError(t, err)
		require.Len(t, states, 3)
		fenced := 0
		for i, st := range states[:2] {
			assert.Equal(t, c.nodes[i].addr+"/0", st.Node)
			assert.True(t, st.Held)
			assert.Equal(t, l.Owner(), st.Owner)
			assert.Equal(t, 9*time.Second, st.TTL)
			assert.NoError(t, st.Err)
			if st.Fence == l.Token() {
				fenced++
			}
		}
		// The token is written back to a quorum (2 of 3), so to at least
		// one of the two nodes still up.
		assert.Positive(t, fenced)
		assert.False(t, states[2].Held)
		assert.Error(t, states[2].Err, "the refused node")

		require.NoError(t, l.Release(ctx))
		states, err = c.rl.Inspect(ctx, "job")
		require.NoError(t, err)
		assert.False(t, states[0].Held)
		assert.Equal(t, l.Token(), max(states[0].Fence, states[1].Fence), "the counter outlives the lock")

		_, err = c.rl.Inspect(ctx, "")
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
		settleDials()
	})
}

// At the hold limit Do releases the lock at once, even though fn ignores
// its context and keeps working: the keys must not wait for their TTL.
func TestDo_HoldLimitReleasesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		const (
			ttl   = time.Second
			limit = 2500 * time.Millisecond
		)
		start := time.Now()
		err := c.rl.Do(context.Background(), "job", ttl, func(ctx context.Context, _ *redlock.Lease) error {
			time.Sleep(limit - time.Millisecond)
			assert.Equal(t, 3, c.holders("job"), "held until the limit")
			latest, err := c.rl.Acquire(ctx, "job", ttl) // the nested handle of the latest extension
			require.NoError(t, err)
			assert.Positive(t, latest.Validity())
			time.Sleep(time.Millisecond)
			synctest.Wait() // the release, made at the limit
			assert.Equal(t, limit, time.Since(start))
			assert.Zero(t, c.holders("job"), "released at the limit, not a TTL after the last extension")
			assert.True(t, time.Now().Before(latest.ValidUntil()))
			assert.LessOrEqual(t, latest.Validity(), time.Duration(0), "released: not to be trusted")
			assert.ErrorIs(t, context.Cause(ctx), redlock.ErrHoldLimit)
			time.Sleep(3 * time.Second) // fn ignores its context
			return nil
		}, redlock.WithMaxHold(limit))
		assert.ErrorIs(t, err, redlock.ErrHoldLimit)
		_, relOK := ev.count(redlock.OpRelease)
		assert.Equal(t, 1, relOK, "one release")
	})
}

// KeepAlive's promises for bad input: a nil context is refused before the
// lock is touched (so a later KeepAlive still works), and a released lock
// gets a Lease that has ended, its cause ErrLockLost.
func TestKeepAlive_NilContextAndReleasedLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquire(t, ctx, "job", time.Second)
		//lint:ignore SA1012 a nil context is the bad input under test
		_, err := l.KeepAlive(nil) //nolint:staticcheck
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		lease, err := l.KeepAlive(ctx)
		require.NoError(t, err, "the refused call left the lock free to keep alive")
		require.NoError(t, lease.Release(ctx))

		l = c.acquire(t, ctx, "job", time.Second)
		require.NoError(t, l.Release(ctx))
		lease, err = l.KeepAlive(ctx)
		require.NoError(t, err)
		<-lease.Done()
		assert.ErrorIs(t, lease.Err(), redlock.ErrLockLost)
		synctest.Wait()
	})
}
