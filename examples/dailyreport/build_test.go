package dailyreport_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/examples/dailyreport"
	"github.com/d3b93e30/redlock/fencing"
)

// BuildReport, the recommended worker. Invariants: a report is built only
// under its lock, by one pod at a time; the lock is extended while it builds
// and the build stops when the lock is lost; the store keeps the report of the
// latest holder and refuses an older holder's; busy is redlock.ErrTaken.

// newStore starts the report store (not one of the lock's nodes).
func newStore(t *testing.T, day string) (*miniredis.Miniredis, *dailyreport.Store) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	return m, dailyreport.NewStore(rdb, day)
}

// newWorker is newPod with a generous per-node timeout: these tests are
// about what BuildReport does with the lock, and on a loaded 2-core machine
// under the race detector five pods on five in-process nodes can stall
// longer than the default (1% of the TTL, 150 ms), which fails the vote.
func newWorker(t *testing.T, ms []*miniredis.Miniredis, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	return newPod(t, ms, append([]redlock.Option{redlock.WithNodeTimeout(2 * time.Second)}, opts...)...)
}

// extensions counts the successful extensions a Client makes.
type extensions struct{ n atomic.Int32 }

func (e *extensions) Observe(ev redlock.Event) {
	if ev.Op == redlock.OpExtend && ev.OK {
		e.n.Add(1)
	}
}

func report(s string) func(context.Context) ([]byte, error) {
	return func(context.Context) ([]byte, error) { return []byte(s), nil }
}

func TestBuildReportSavesWithTheToken(t *testing.T) {
	ms := newCluster(t, 5)
	pod := newWorker(t, ms)
	_, store := newStore(t, "d1")
	ctx := t.Context()

	var token uint64
	built, err := dailyreport.BuildReport(ctx, pod, store, "acme", func(ctx context.Context) ([]byte, error) {
		// The lock is held on the nodes while the report builds.
		for i, m := range ms {
			assert.True(t, m.Exists(acmeKey), "node %d", i)
		}
		l, err := pod.Acquire(ctx, acmeKey, dailyreport.TTL) // reentrant: the held lock
		require.NoError(t, err)
		token = l.Token()
		return []byte("acme's report"), nil
	})
	require.NoError(t, err)
	assert.True(t, built)
	got, gotToken, err := store.Load(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, "acme's report", string(got))
	assert.NotZero(t, token)
	assert.Equal(t, token, gotToken, "saved with the lock's fencing token")
	require.NoError(t, pod.Close()) // Release returns at a majority; Close waits for the rest
	for i, m := range ms {
		assert.False(t, m.Exists(acmeKey), "node %d: lock key left after release", i)
	}

	// Another pod then finds it built: it does not build it again.
	built, err = dailyreport.BuildReport(ctx, newWorker(t, ms), store, "acme", func(context.Context) ([]byte, error) {
		t.Error("built twice")
		return nil, nil
	})
	require.NoError(t, err)
	assert.False(t, built)
}

func TestBuildReportBusyIsErrTaken(t *testing.T) {
	ms := newCluster(t, 5)
	podA, podB := newWorker(t, ms), newWorker(t, ms)
	_, store := newStore(t, "d1")
	finish := holdWhileWorking(func(work func()) error {
		_, err := dailyreport.BuildReport(context.Background(), podA, store, "acme", func(context.Context) ([]byte, error) {
			work()
			return []byte("A"), nil
		})
		return err
	})

	built, err := dailyreport.BuildReport(t.Context(), podB, store, "acme", func(context.Context) ([]byte, error) {
		t.Error("pod B built while pod A held the lock")
		return nil, nil
	})
	assert.False(t, built)
	require.ErrorIs(t, err, redlock.ErrTaken, "busy is the library's own error")
	requireLocked(t, err, 5)
	require.NoError(t, finish())
}

func TestBuildReportExtendsWhileBuilding(t *testing.T) {
	ms := newCluster(t, 5)
	ext := &extensions{}
	pod := newWorker(t, ms, redlock.WithObserver(ext))
	_, store := newStore(t, "d1")
	built, err := dailyreport.BuildReport(t.Context(), pod, store, "acme", func(ctx context.Context) ([]byte, error) {
		for ext.n.Load() < 3 { // a build that outlasts three extension intervals
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(5 * time.Millisecond):
			}
		}
		return []byte("A"), nil
	}, redlock.WithExtendInterval(20*time.Millisecond)) // TTL/3 by default
	require.NoError(t, err)
	assert.True(t, built)
}

// The lock is lost while pod A builds (its keys are deleted on every node, as
// when they expire during a long pause): A's build context ends, nothing A
// builds afterwards is saved, pod B builds and saves the report, and A's
// write, were it delayed until now, is refused by the store.
func TestBuildReportLostLockStopsTheBuildAndFencesTheWrite(t *testing.T) {
	ms := newCluster(t, 5)
	podA, podB := newWorker(t, ms), newWorker(t, ms)
	_, store := newStore(t, "d1")
	ctx := t.Context()

	var (
		tokenA uint64
		cause  error
	)
	builtA, errA := dailyreport.BuildReport(ctx, podA, store, "acme", func(ctx context.Context) ([]byte, error) {
		l, err := podA.Acquire(ctx, acmeKey, dailyreport.TTL) // reentrant: the held lock
		require.NoError(t, err)
		tokenA = l.Token()
		// The keys go as they would expire during a long pause: once the
		// acquisition has vouched for every node (amnesia guard), as it
		// does a few milliseconds after a key's first use.
		require.Eventually(t, func() bool {
			states, err := podA.Inspect(ctx, acmeKey)
			if err != nil {
				return false
			}
			for _, st := range states {
				if !st.Trusted {
					return false
				}
			}
			return true
		}, 5*time.Second, 5*time.Millisecond, "the acquisition vouches for every node")
		for _, m := range ms {
			m.Del(acmeKey)
		}
		<-ctx.Done() // stopped by the next extension
		cause = context.Cause(ctx)

		// Pod B builds the report meanwhile.
		builtB, err := dailyreport.BuildReport(ctx, podB, store, "acme", report("B"))
		require.ErrorIs(t, err, context.Canceled, "ctx has ended: B must use its own")
		require.False(t, builtB)
		builtB, err = dailyreport.BuildReport(t.Context(), podB, store, "acme", report("B"))
		require.NoError(t, err)
		require.True(t, builtB)
		return []byte("A"), nil // a build that ignored its context
	}, redlock.WithExtendInterval(20*time.Millisecond))
	require.ErrorIs(t, cause, redlock.ErrLockLost)
	require.ErrorIs(t, cause, redlock.ErrNotHeld)
	assert.False(t, builtA)
	require.ErrorIs(t, errA, redlock.ErrLockLost)

	got, tokenB, err := store.Load(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, "B", string(got), "A's late report was not saved")
	assert.Greater(t, tokenB, tokenA)

	// A write of A's that was on its way when the lock passed to B.
	err = store.Save(ctx, "acme", tokenA, []byte("A"))
	var stale *fencing.StaleError
	require.ErrorAs(t, err, &stale)
	assert.Equal(t, tokenB, stale.Highest)
	got, _, err = store.Load(ctx, "acme")
	require.NoError(t, err)
	assert.Equal(t, "B", string(got))
}

func TestBuildReportBuildErrorSavesNothing(t *testing.T) {
	ms := newCluster(t, 3)
	pod := newWorker(t, ms)
	_, store := newStore(t, "d1")
	boom := errors.New("renderer failed")
	built, err := dailyreport.BuildReport(t.Context(), pod, store, "acme", func(context.Context) ([]byte, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	assert.False(t, built)
	_, _, err = store.Load(t.Context(), "acme")
	require.ErrorIs(t, err, redis.Nil)
	// The lock was released: the next attempt builds at once.
	built, err = dailyreport.BuildReport(t.Context(), pod, store, "acme", report("A"))
	require.NoError(t, err)
	assert.True(t, built)
}

func TestBuildReportSurvivesMinorityDown(t *testing.T) {
	ms := newCluster(t, 5)
	pod := newWorker(t, ms)
	_, store := newStore(t, "d1")
	ms[0].Close()
	ms[3].Close()
	built, err := dailyreport.BuildReport(t.Context(), pod, store, "acme", report("A"))
	require.NoError(t, err)
	assert.True(t, built)

	ms[1].Close() // now a majority is down: not "locked", just unavailable
	built, err = dailyreport.BuildReport(t.Context(), pod, store, "globex", func(context.Context) ([]byte, error) {
		t.Error("built without a quorum")
		return nil, nil
	})
	assert.False(t, built)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	assert.NotErrorIs(t, err, redlock.ErrTaken)
}

func TestBuildReportNeverTwoAtOnce(t *testing.T) {
	ms := newCluster(t, 5)
	_, rdb := newNode(t) // the report store
	const pods, days = 5, 10
	var (
		inBuild, overlaps atomic.Int32
		mu                sync.Mutex
		builtOn           = map[int]int{} // day -> reports saved
		wg                sync.WaitGroup
	)
	for range pods {
		pod := newWorker(t, ms)
		wg.Go(func() {
			for day := range days {
				store := dailyreport.NewStore(rdb, strconv.Itoa(day))
				built, err := dailyreport.BuildReport(t.Context(), pod, store, "acme", func(context.Context) ([]byte, error) {
					if inBuild.Add(1) > 1 {
						overlaps.Add(1)
					}
					time.Sleep(time.Millisecond)
					inBuild.Add(-1)
					return []byte("r"), nil
				})
				if built {
					mu.Lock()
					builtOn[day]++
					mu.Unlock()
				}
				if err != nil && !errors.Is(err, redlock.ErrTaken) {
					t.Errorf("unexpected error: %v", err)
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, overlaps.Load(), "two pods built at once")
	for day, n := range builtOn {
		assert.Equal(t, 1, n, "day %d: built more than once", day)
	}
	assert.NotEmpty(t, builtOn)
}

func TestBuildReportInvalidArguments(t *testing.T) {
	pod := newWorker(t, newCluster(t, 1))
	_, store := newStore(t, "d1")
	ctx := t.Context()
	var nilCtx context.Context
	build := func(context.Context) ([]byte, error) {
		t.Error("built")
		return nil, nil
	}
	for name, call := range map[string]func() (bool, error){
		"empty client": func() (bool, error) { return dailyreport.BuildReport(ctx, pod, store, "", build) },
		"nil client":   func() (bool, error) { return dailyreport.BuildReport(ctx, nil, store, "acme", build) },
		"nil store":    func() (bool, error) { return dailyreport.BuildReport(ctx, pod, nil, "acme", build) },
		"nil build":    func() (bool, error) { return dailyreport.BuildReport(ctx, pod, store, "acme", nil) },
		"nil context":  func() (bool, error) { return dailyreport.BuildReport(nilCtx, pod, store, "acme", build) },
	} {
		t.Run(name, func(t *testing.T) {
			var (
				built bool
				err   error
			)
			require.NotPanics(t, func() { built, err = call() })
			assert.False(t, built)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.Contains(t, err.Error(), "dailyreport: ")
		})
	}
}
