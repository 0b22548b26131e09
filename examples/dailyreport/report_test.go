package dailyreport_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/examples/dailyreport"
)

const acmeKey = "lock:report:{acme}"

// newNode starts a miniredis node and a go-redis client for it, both closed
// when the test ends.
func newNode(t *testing.T) (*miniredis.Miniredis, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	rdb := redlock.NewNodeClient(m.Addr(), nil)
	t.Cleanup(func() { _ = rdb.Close() })
	return m, rdb
}

// newCluster starts n miniredis nodes.
func newCluster(t *testing.T, n int) []*miniredis.Miniredis {
	t.Helper()
	ms := make([]*miniredis.Miniredis, n)
	for i := range ms {
		ms[i] = miniredis.RunT(t)
	}
	return ms
}

// newPod returns a Redlock client over the nodes with its own connections,
// as a separate worker process would have.
func newPod(t *testing.T, ms []*miniredis.Miniredis, opts ...redlock.Option) *redlock.Client {
	t.Helper()
	urls := make([]string, len(ms))
	for i, m := range ms {
		urls[i] = "redis://" + m.Addr()
	}
	c, err := redlock.Dial(urls, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// requireLocked checks that err is the "resource is locked" error with the
// library's error and per-node outcomes in its chain.
func requireLocked(t *testing.T, err error, nodes int) *redlock.QuorumError {
	t.Helper()
	require.ErrorIs(t, err, dailyreport.ErrResourceLocked)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, acmeKey, qe.Key)
	assert.Len(t, qe.Nodes, nodes)
	// A contender may win a node or two from the holder's stragglers, never
	// a majority.
	assert.Less(t, qe.Granted, qe.Quorum)
	assert.Contains(t, outcomes(qe), redlock.OutcomeTaken)
	return qe
}

func outcomes(qe *redlock.QuorumError) []redlock.Outcome {
	var os []redlock.Outcome
	for _, n := range qe.Nodes {
		os = append(os, n.Outcome)
	}
	return os
}

// holdWhileWorking starts call in the background with work that blocks, and
// returns once the work has started (the lock is held). finish lets the work
// return and gives call's error.
func holdWhileWorking(call func(work func()) error) (finish func() error) {
	started, done := make(chan struct{}), make(chan struct{})
	callErr := make(chan error, 1)
	go func() {
		callErr <- call(func() {
			close(started)
			<-done
		})
	}()
	<-started
	return func() error {
		close(done)
		return <-callErr
	}
}

func TestLockKey(t *testing.T) {
	assert.Equal(t, "lock:report:{acme}", dailyreport.LockKey("acme"))
	assert.Equal(t, 15*time.Second, dailyreport.TTL)
}

func TestPerformLockedWorkRunsWorkAndReleases(t *testing.T) {
	m, rdb := newNode(t)
	ran := false
	err := dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() {
		ran = true
		// While work runs, the node holds the lock with the 15 s TTL and a
		// random owner value (128 bits, base64: 22 characters).
		require.True(t, m.Exists(acmeKey))
		assert.Equal(t, 15*time.Second, m.TTL(acmeKey))
		owner, err := m.Get(acmeKey)
		require.NoError(t, err)
		assert.Len(t, owner, 22)
	})
	require.NoError(t, err)
	assert.True(t, ran)
	assert.False(t, m.Exists(acmeKey), "lock key left after release")
	assert.Empty(t, m.Keys(), "no fencing counter or other key left")
}

func TestPerformLockedWorkOwnerIsRandom(t *testing.T) {
	m, rdb := newNode(t)
	seen := map[string]bool{}
	for range 3 {
		require.NoError(t, dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() {
			owner, err := m.Get(acmeKey)
			require.NoError(t, err)
			seen[owner] = true
		}))
	}
	assert.Len(t, seen, 3, "each call uses a fresh owner value")
}

func TestPerformLockedWorkConcurrentCallIsLocked(t *testing.T) {
	m, rdb := newNode(t)
	finish := holdWhileWorking(func(work func()) error {
		return dailyreport.PerformLockedWork(context.Background(), rdb, "acme", work)
	})

	secondRan := false
	err := dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { secondRan = true })
	qe := requireLocked(t, err, 1)
	assert.Equal(t, redlock.OutcomeTaken, qe.Nodes[0].Outcome)
	assert.False(t, secondRan, "the second call ran its work while the first held the lock")
	assert.True(t, m.Exists(acmeKey), "the first holder's key must stay")

	// Another client's report is not blocked.
	otherRan := false
	require.NoError(t, dailyreport.PerformLockedWork(t.Context(), rdb, "globex", func() { otherRan = true }))
	assert.True(t, otherRan)

	require.NoError(t, finish())
	assert.False(t, m.Exists(acmeKey))

	// Once released, the next worker gets it.
	require.NoError(t, dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { secondRan = true }))
	assert.True(t, secondRan)
}

func TestPerformLockedWorkPanicReleasesAndPropagates(t *testing.T) {
	m, rdb := newNode(t)
	boom := errors.New("pdf renderer crashed")
	var (
		recovered any
		returned  bool
	)
	func() {
		defer func() { recovered = recover() }()
		_ = dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() {
			require.True(t, m.Exists(acmeKey))
			panic(boom)
		})
		returned = true
	}()
	assert.False(t, returned, "PerformLockedWork returned instead of panicking")
	assert.Same(t, boom, recovered, "the original panic value must propagate")
	assert.False(t, m.Exists(acmeKey), "the lock must be released when work panics")

	// The report is not blocked afterwards.
	ran := false
	require.NoError(t, dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { ran = true }))
	assert.True(t, ran)
}

func TestPerformLockedWorkHeldByAnotherOwner(t *testing.T) {
	m, rdb := newNode(t)
	require.NoError(t, m.Set(acmeKey, "other-owner"))
	m.SetTTL(acmeKey, 10*time.Second)

	ran := false
	err := dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { ran = true })
	requireLocked(t, err, 1)
	assert.False(t, ran)

	v, gerr := m.Get(acmeKey)
	require.NoError(t, gerr)
	assert.Equal(t, "other-owner", v, "another owner's key must be untouched")
	assert.Equal(t, 10*time.Second, m.TTL(acmeKey), "another owner's TTL must be untouched")
}

func TestPerformLockedWorkCrashedPodBlocksOnlyUntilTTL(t *testing.T) {
	m, rdb := newNode(t)
	// A pod takes the lock exactly as PerformLockedWork does, then crashes:
	// it never releases.
	crashed, err := redlock.New([]redis.UniversalClient{rdb}, redlock.WithFencing(false))
	require.NoError(t, err)
	_, err = crashed.TryAcquire(t.Context(), dailyreport.LockKey("acme"), dailyreport.TTL)
	require.NoError(t, err)
	require.NoError(t, crashed.Close())

	ran := false
	requireLocked(t, dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { ran = true }), 1)
	m.FastForward(14 * time.Second)
	requireLocked(t, dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { ran = true }), 1)
	assert.False(t, ran)

	m.FastForward(2 * time.Second) // 16 s after the crash: past the 15 s TTL
	require.NoError(t, dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { ran = true }))
	assert.True(t, ran)
	assert.False(t, m.Exists(acmeKey))
}

func TestPerformLockedWorkLockLostDuringWork(t *testing.T) {
	m, rdb := newNode(t)
	// Work outlasts the TTL on the node and another pod takes the report:
	// the release must not delete the other pod's key, and the caller must
	// hear that its lock was lost.
	err := dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() {
		m.FastForward(16 * time.Second)
		require.NoError(t, m.Set(acmeKey, "next-pod"))
	})
	require.ErrorIs(t, err, redlock.ErrNotHeld)
	assert.NotErrorIs(t, err, dailyreport.ErrResourceLocked)
	assert.Contains(t, err.Error(), "work ran")
	v, gerr := m.Get(acmeKey)
	require.NoError(t, gerr)
	assert.Equal(t, "next-pod", v)
}

func TestPerformLockedWorkNodeDownIsNotLocked(t *testing.T) {
	m, rdb := newNode(t)
	m.Close()
	ran := false
	err := dailyreport.PerformLockedWork(t.Context(), rdb, "acme", func() { ran = true })
	require.Error(t, err)
	assert.False(t, ran)
	assert.NotErrorIs(t, err, dailyreport.ErrResourceLocked, "an unreachable node is not a held lock")
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	assert.Equal(t, redlock.OutcomeUnreachable, qe.Nodes[0].Outcome)
}

func TestPerformLockedWorkCanceledContext(t *testing.T) {
	_, rdb := newNode(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	ran := false
	err := dailyreport.PerformLockedWork(ctx, rdb, "acme", func() { ran = true })
	require.ErrorIs(t, err, context.Canceled)
	assert.NotErrorIs(t, err, dailyreport.ErrResourceLocked)
	assert.False(t, ran)
}

func TestPerformLockedWorkInvalidArguments(t *testing.T) {
	_, rdb := newNode(t)
	ctx := t.Context()
	ran := false
	work := func() { ran = true }
	var nilCtx context.Context

	for name, call := range map[string]func() error{
		"empty client id": func() error { return dailyreport.PerformLockedWork(ctx, rdb, "", work) },
		"nil rdb":         func() error { return dailyreport.PerformLockedWork(ctx, nil, "acme", work) },
		"nil work":        func() error { return dailyreport.PerformLockedWork(ctx, rdb, "acme", nil) },
		"nil context":     func() error { return dailyreport.PerformLockedWork(nilCtx, rdb, "acme", work) },
		"nil rdb, no id":  func() error { return dailyreport.PerformLockedWork(ctx, nil, "", work) },
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
			assert.NotErrorIs(t, err, dailyreport.ErrResourceLocked)
			assert.Contains(t, err.Error(), "dailyreport: ")
		})
	}
	assert.False(t, ran)

	err := dailyreport.PerformLockedWork(ctx, rdb, "", work)
	assert.EqualError(t, err, "dailyreport: empty client id: redlock: invalid argument")
	err = dailyreport.PerformLockedWork(ctx, nil, "acme", work)
	assert.EqualError(t, err, "dailyreport: nil redis client: redlock: invalid argument")
}
