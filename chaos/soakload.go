package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/d3b93e30/redlock"
)

// soakPermits is the number of permits of a soak semaphore.
const soakPermits = 2

// clientLoop is goroutine i of the soak: on key i mod Keys, through client
// i mod Conns, an operation of the mix after another until ctx ends.
func (r *soakRun) clientLoop(ctx context.Context, i int) {
	rng := rand.New(rand.NewPCG(r.opt.Seed, uint64(i)+1))
	c := r.clients[i%len(r.clients)].Client
	k := i % r.opt.Keys
	// Start spread over the first think time, not all at once.
	sleepCtx(ctx, time.Duration(rng.Int64N(int64(r.opt.Think)+1)))
	for ctx.Err() == nil {
		op := pickOp(rng, r.opt.Mix)
		switch op {
		case SoakAcquire, SoakTry:
			r.lockOp(ctx, c, i, k, op)
		case SoakDo:
			r.doOp(ctx, c, i, k)
		case SoakSemaphore:
			r.semOp(ctx, c, i, k)
		case SoakMulti:
			r.multiOp(ctx, c, i, k)
		case SoakElect:
			r.electOp(ctx, c, i, k)
		}
		// A pause between two operations, as a worker between jobs.
		sleepCtx(ctx, time.Duration(rng.Int64N(2*int64(r.opt.Think)+1)))
	}
}

// failed records a failed acquisition; an error that says the library
// refused the soak's own arguments is an unexpected error.
func (r *soakRun) failed(ctx context.Context, op SoakOp, err error, latency time.Duration) {
	if ctx.Err() != nil {
		return // the soak's end, not a failure
	}
	r.done(op, err, latency)
	if errors.Is(err, redlock.ErrInvalidArgument) {
		r.addErr(fmt.Sprintf("%s: %v", op, err))
	}
}

// released checks a release's error: "not held" (the lock expired while a
// node was down, or a paused holder came back late) and errors of a node
// fault are expected; anything else is not.
func (r *soakRun) released(op SoakOp, err error) {
	if err == nil || errors.Is(err, redlock.ErrNotHeld) || errors.Is(err, redlock.ErrNoQuorum) ||
		errors.Is(err, context.DeadlineExceeded) {
		return
	}
	if errors.Is(err, redlock.ErrInvalidArgument) || errors.Is(err, redlock.ErrClosed) {
		r.addErr(fmt.Sprintf("%s: release: %v", op, err))
	}
}

// work writes token to h's register every Hold/3 until hold has passed or
// live says the holder no longer holds the lock; it writes at least once
// while live. It records the end of the hold.
func (r *soakRun) work(ctx context.Context, h *soakHold, token uint64, hold time.Duration, live func() bool) {
	deadline := time.Now().Add(hold)
	every := max(hold/3, 2*time.Millisecond)
	for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
		if !live() {
			break
		}
		h.write(token)
		sleepCtx(ctx, min(every, time.Until(deadline)))
	}
	h.released(time.Now())
}

// takePause claims a pending client pause (the client-pause fault), if
// there is one.
func (r *soakRun) takePause() bool {
	for {
		n := r.pauses.Load()
		if n <= 0 {
			return false
		}
		if r.pauses.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// lockOp is one Acquire (or TryAcquire) and hold. A holder that claims a
// pending client pause freezes for 2 × TTL right after acquiring, then
// writes once without looking at the clock, as a process waking from a GC
// pause would: the fenced register must refuse that write when another
// client holds the lock by then.
func (r *soakRun) lockOp(ctx context.Context, c *redlock.Client, i, k int, op SoakOp) {
	key := keyName(k)
	start := time.Now()
	var (
		lock *redlock.Lock
		err  error
	)
	if op == SoakTry {
		lock, err = c.TryAcquire(ctx, key, r.opt.TTL)
	} else {
		actx, cancel := context.WithTimeout(ctx, 2*r.opt.TTL)
		lock, err = c.Acquire(actx, key, r.opt.TTL)
		cancel()
	}
	latency := time.Since(start)
	if err != nil {
		r.failed(ctx, op, err, latency)
		return
	}
	r.done(op, nil, latency)
	h := r.judge(key).acquired(i, lock.Token(), lock.AcquiredAt(), lock.ValidUntil(), latency)
	if op == SoakAcquire && r.takePause() {
		sleepCtx(ctx, 2*r.opt.TTL)
		h.write(lock.Token())
		h.released(time.Now())
	} else {
		r.work(ctx, h, lock.Token(), r.opt.Hold, func() bool { return time.Now().Before(lock.ValidUntil()) })
	}
	r.released(op, lock.Release(context.WithoutCancel(ctx)))
}

// doOp is one Client.Do holding for TTL/2: the lease extends the lock
// (every TTL/3) while the holder writes.
func (r *soakRun) doOp(ctx context.Context, c *redlock.Client, i, k int) {
	key := keyName(k)
	start := time.Now()
	acquired := false
	err := c.Do(ctx, key, r.opt.TTL, func(lctx context.Context, lease *redlock.Lease) error {
		acquired = true
		latency := time.Since(start)
		r.done(SoakDo, nil, latency)
		lock := lease.Lock()
		h := r.judge(key).acquired(i, lock.Token(), lock.AcquiredAt(), lock.ValidUntil(), latency)
		r.work(ctx, h, lock.Token(), r.opt.TTL/2, leaseLive(lctx, lease, h))
		return nil
	})
	if !acquired && err != nil {
		r.failed(ctx, SoakDo, err, time.Since(start))
	}
}

// leaseLive returns the holder's check of a lease: live while its context
// is, recording each extension with h.
func leaseLive(lctx context.Context, lease *redlock.Lease, h *soakHold) func() bool {
	valid := lease.ValidUntil()
	return func() bool {
		if lctx.Err() != nil {
			return false
		}
		if v := lease.ValidUntil(); !v.Equal(valid) {
			valid = v
			h.extended(v)
		}
		return true
	}
}

// semOp takes one permit of the semaphore beside key k: each of its slots
// is a lock of its own, judged as one.
func (r *soakRun) semOp(ctx context.Context, c *redlock.Client, i, k int) {
	sem, err := c.Semaphore(keyName(k)+":sem", soakPermits)
	if err != nil {
		r.failed(ctx, SoakSemaphore, err, 0)
		return
	}
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 2*r.opt.TTL)
	p, err := sem.Acquire(actx, r.opt.TTL)
	cancel()
	latency := time.Since(start)
	if err != nil {
		r.failed(ctx, SoakSemaphore, err, latency)
		return
	}
	r.done(SoakSemaphore, nil, latency)
	h := r.judge(p.Key()).acquired(i, p.Token(), p.AcquiredAt(), p.ValidUntil(), latency)
	r.work(ctx, h, p.Token(), r.opt.Hold, func() bool { return time.Now().Before(p.ValidUntil()) })
	r.released(SoakSemaphore, p.Release(context.WithoutCancel(ctx)))
}

// multiOp is one DoMulti over key k and the next key: one hold per key,
// each with that key's token.
func (r *soakRun) multiOp(ctx context.Context, c *redlock.Client, i, k int) {
	keys := []string{keyName(k), keyName((k + 1) % r.opt.Keys)}
	if keys[0] == keys[1] {
		keys = keys[:1]
	}
	start := time.Now()
	acquired := false
	err := c.DoMulti(ctx, keys, r.opt.TTL, func(lctx context.Context, lease *redlock.Lease) error {
		acquired = true
		latency := time.Since(start)
		r.done(SoakMulti, nil, latency)
		ml := lease.MultiLock()
		holds := make([]*soakHold, len(keys))
		tokens := make([]uint64, len(keys))
		for n, key := range keys {
			tokens[n], _ = ml.Token(key)
			holds[n] = r.judge(key).acquired(i, tokens[n], ml.AcquiredAt(), ml.ValidUntil(), latency)
		}
		valid := lease.ValidUntil()
		deadline := time.Now().Add(r.opt.Hold)
		every := max(r.opt.Hold/3, 2*time.Millisecond)
		for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
			if lctx.Err() != nil {
				break
			}
			if v := lease.ValidUntil(); !v.Equal(valid) {
				valid = v
				for _, h := range holds {
					h.extended(v)
				}
			}
			for n, h := range holds {
				h.write(tokens[n])
			}
			sleepCtx(ctx, min(every, time.Until(deadline)))
		}
		for _, h := range holds {
			h.released(time.Now())
		}
		return nil
	})
	if !acquired && err != nil {
		r.failed(ctx, SoakMulti, err, time.Since(start))
	}
}

// electOp is one Campaign on the election beside key k, leading for
// TTL/2 (the term is the fencing token), then Resign.
func (r *soakRun) electOp(ctx context.Context, c *redlock.Client, i, k int) {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := time.AfterFunc(2*r.opt.TTL, cancel)
	start := time.Now()
	l, err := c.Campaign(cctx, keyName(k)+":elect", fmt.Sprintf("client-%d", i), r.opt.TTL)
	stop.Stop()
	latency := time.Since(start)
	if err != nil {
		r.failed(ctx, SoakElect, err, latency)
		return
	}
	r.done(SoakElect, nil, latency)
	lock := l.Lease().Lock()
	h := r.judge(lock.Key()).acquired(i, l.Term(), lock.AcquiredAt(), lock.ValidUntil(), latency)
	r.work(ctx, h, l.Term(), r.opt.TTL/2, leaseLive(l.Context(), l.Lease(), h))
	r.released(SoakElect, l.Resign(context.WithoutCancel(ctx)))
}
