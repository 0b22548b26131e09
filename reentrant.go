package redlock

import (
	"context"
	"fmt"
)

// Reentrancy goes through context.Context, since Go has no goroutine
// identity to tie a lock to: a Lease's context (and so the context Do gives
// its function) records the lock it keeps, and Acquire with such a context,
// on the same Client and key, returns a nested handle instead of contending
// with its own holder (which would wait until the TTL and then fail).

// heldKey is the context key under which a Lease's context records it.
type heldKey struct{}

// held is one lock held by a context, linked to those held further up the
// call chain.
type held struct {
	lease *Lease
	outer *held
}

// withHeld returns ctx recording that it holds s's lock.
func withHeld(ctx context.Context, s *Lease) context.Context {
	outer, _ := ctx.Value(heldKey{}).(*held)
	return context.WithValue(ctx, heldKey{}, &held{lease: s, outer: outer})
}

// heldLease returns the Lease through which ctx holds the key name (prefix
// included) on c, or nil. A multi-key lock's Lease holds none: it is not
// reentrant (AcquireMulti).
func heldLease(ctx context.Context, c *Client, name string) *Lease {
	for h, _ := ctx.Value(heldKey{}).(*held); h != nil; h = h.outer {
		if h.lease.client == c && h.lease.name == name && h.lease.Lock().multi == nil && h.lease.Lock().rw == nil {
			return h.lease
		}
	}
	return nil
}

// reentrant returns a nested handle when ctx already holds key (with cfg's
// prefix) on c; ok is false when it does not, and Acquire must contend as
// usual. A nested handle is a copy of the holder's latest Lock marked nested:
// its Release leaves the nodes alone, so the lock stays until the outermost
// holder releases it, and its validity is the outermost Lease's (holder).
func (c *Client) reentrant(ctx context.Context, key string, cfg config) (l *Lock, ok bool, err error) {
	s := heldLease(ctx, c, cfg.prefix+key)
	if s == nil {
		return nil, false, nil
	}
	if c.eng.Closed() {
		return nil, true, ErrClosed
	}
	if s.ctx.Err() != nil {
		return nil, true, fmt.Errorf("%w: acquire %s: the lock held by the context has ended: %w", ErrNotAcquired, keyText(key), context.Cause(s.ctx))
	}
	nested := *s.Lock()
	nested.nested = true
	if nested.holder == nil { // s itself is not nested
		nested.holder = s
	}
	nested.key = key
	nested.attempts = 0
	return &nested, true, nil
}
