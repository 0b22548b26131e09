package etcdcompare

import (
	"context"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/chaos"
)

// RedlockLocker adapts a redlock.Client to Locker, to show that the seam fits
// both locks: a Redlock holder's belief ends at a fixed deadline, the lock's
// validity time, so Done closes then.
type RedlockLocker struct {
	c *redlock.Client
}

// NewRedlockLocker returns a Locker over c; c stays the caller's to close.
func NewRedlockLocker(c *redlock.Client) *RedlockLocker { return &RedlockLocker{c: c} }

// Acquire implements chaos.Locker with redlock.Client.Acquire; its errors are that
// method's (test them with errors.Is/As as documented there).
func (l *RedlockLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (chaos.Held, error) {
	lock, err := l.c.Acquire(ctx, key, ttl)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	time.AfterFunc(time.Until(lock.ValidUntil()), func() { close(done) })
	return &redlockHeld{lock: lock, done: done}, nil
}

// redlockHeld is one held Redlock lock.
type redlockHeld struct {
	lock *redlock.Lock
	done chan struct{}
}

func (h *redlockHeld) Token() uint64                     { return h.lock.Token() }
func (h *redlockHeld) Done() <-chan struct{}             { return h.done }
func (h *redlockHeld) Release(ctx context.Context) error { return h.lock.Release(ctx) }
