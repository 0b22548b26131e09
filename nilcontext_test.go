package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// Every call that takes a context refuses a nil one with
// ErrInvalidArgument, before it contacts a node: it used to panic, for
// Leader and Inspect in a goroutine of the call, which crashed the program
// whatever the caller recovered.
func TestNilContext_IsInvalidArgument(t *testing.T) {
	c := newCluster(t, 3, noGuard)
	ctx := context.Background()
	var nilCtx context.Context
	work := func(context.Context, *redlock.Lease) error { return nil }
	l := c.acquire(t, ctx, "held", 10*time.Second)
	defer l.Release(ctx)
	lease, err := c.acquire(t, ctx, "leased", 10*time.Second).KeepAlive(ctx)
	require.NoError(t, err)
	defer lease.Release(ctx)
	ml, err := c.rl.AcquireMulti(ctx, []string{"m1", "m2"}, 10*time.Second)
	require.NoError(t, err)
	defer ml.Release(ctx)
	lead, err := c.rl.Campaign(ctx, "election", "me", 10*time.Second)
	require.NoError(t, err)
	defer lead.Resign(ctx)
	sem, err := c.rl.Semaphore("sem", 2)
	require.NoError(t, err)
	rw, err := c.rl.RWMutex("rw")
	require.NoError(t, err)

	calls := map[string]func() error{
		"Acquire":         func() error { _, err := c.rl.Acquire(nilCtx, "k", time.Second); return err },
		"TryAcquire":      func() error { _, err := c.rl.TryAcquire(nilCtx, "k", time.Second); return err },
		"Do":              func() error { return c.rl.Do(nilCtx, "k", time.Second, work) },
		"AcquireMulti":    func() error { _, err := c.rl.AcquireMulti(nilCtx, []string{"a"}, time.Second); return err },
		"TryAcquireMulti": func() error { _, err := c.rl.TryAcquireMulti(nilCtx, []string{"a"}, time.Second); return err },
		"DoMulti":         func() error { return c.rl.DoMulti(nilCtx, []string{"a"}, time.Second, work) },
		"Inspect":         func() error { _, err := c.rl.Inspect(nilCtx, "k"); return err },
		"Leader":          func() error { _, err := c.rl.Leader(nilCtx, "election"); return err },
		"WatchLeader":     func() error { _, err := c.rl.WatchLeader(nilCtx, "election", time.Second); return err },
		"Campaign":        func() error { _, err := c.rl.Campaign(nilCtx, "e2", "me", time.Second); return err },
		"Lead": func() error {
			return c.rl.Lead(nilCtx, "e2", "me", time.Second, func(context.Context, *redlock.Leadership) error { return nil })
		},
		"Semaphore.Acquire":    func() error { _, err := sem.Acquire(nilCtx, time.Second); return err },
		"Semaphore.TryAcquire": func() error { _, err := sem.TryAcquire(nilCtx, time.Second); return err },
		"Semaphore.Do":         func() error { return sem.Do(nilCtx, time.Second, work) },
		"RWMutex.RLock":        func() error { _, err := rw.RLock(nilCtx, time.Second); return err },
		"RWMutex.TryRLock":     func() error { _, err := rw.TryRLock(nilCtx, time.Second); return err },
		"RWMutex.Lock":         func() error { _, err := rw.Lock(nilCtx, time.Second); return err },
		"RWMutex.TryLock":      func() error { _, err := rw.TryLock(nilCtx, time.Second); return err },
		"RWMutex.DoRead":       func() error { return rw.DoRead(nilCtx, time.Second, work) },
		"RWMutex.DoWrite":      func() error { return rw.DoWrite(nilCtx, time.Second, work) },
		"Lock.Extend":          func() error { _, err := l.Extend(nilCtx, time.Second); return err },
		"Lock.KeepAlive":       func() error { _, err := l.KeepAlive(nilCtx); return err },
		"Lock.Release":         func() error { return l.Release(nilCtx) },
		"MultiLock.Extend":     func() error { _, err := ml.Extend(nilCtx, time.Second); return err },
		"MultiLock.Release":    func() error { return ml.Release(nilCtx) },
		"Lease.Release":        func() error { return lease.Release(nilCtx) },
		"Leadership.Resign":    func() error { return lead.Resign(nilCtx) },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = call() })
			requireInvalid(t, err, "nil context")
		})
	}
	// The handles that refused a nil context still work.
	_, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
}
