package redlock

import (
	"fmt"
	"time"
)

// DefaultDriftFactor is the clock drift factor the Redlock spec suggests: a
// node's clock may run up to 1% fast or slow relative to the client's during
// one TTL.
const DefaultDriftFactor = 0.01

// expiryPrecision is the fixed part of the drift allowance: Redis expires keys
// with 1 ms precision, plus 1 ms for the client's own clock reading (Redlock
// spec, "Safety arguments").
const expiryPrecision = 2 * time.Millisecond

// Drift returns the clock drift allowance for a lock of the given TTL:
// ttl × driftFactor + 2 ms. A lock is only trusted for TTL − elapsed − Drift,
// so a node whose clock runs slightly fast (and expires the key early) cannot
// free the key while the client still believes it holds it.
func Drift(ttl time.Duration, driftFactor float64) time.Duration {
	return time.Duration(float64(ttl)*driftFactor) + expiryPrecision
}

// Validity returns how long a lock stays trusted after an acquisition or
// extension whose first request was sent `elapsed` ago:
// ttl − elapsed − Drift(ttl, driftFactor). Zero or negative means the lock
// must not be used: it may already have expired on some node.
func Validity(ttl, elapsed time.Duration, driftFactor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, driftFactor)
}

// checkTTL reports an error when ttl cannot give a positive validity: it must
// be a whole number of milliseconds of at least 1 ms (Redis PX), above the
// drift allowance, and above the per-node timeout (otherwise a single slow
// node could use up the whole lock).
func checkTTL(ttl time.Duration, driftFactor float64, nodeTimeout time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl %v is below Redis's 1 ms expiry precision", ErrInvalidArgument, ttl)
	}
	if ttl%time.Millisecond != 0 {
		// The nodes get whole milliseconds (PX): a fraction would be cut
		// off there but counted in the validity time.
		return fmt.Errorf("%w: ttl %v is not a whole number of milliseconds", ErrInvalidArgument, ttl)
	}
	if d := Drift(ttl, driftFactor); ttl <= d {
		return fmt.Errorf("%w: ttl %v is not above the clock drift allowance %v (ttl × %g + 2 ms)", ErrInvalidArgument, ttl, d, driftFactor)
	}
	if nodeTimeout >= ttl {
		return fmt.Errorf("%w: per-node timeout %v must be below the ttl %v", ErrInvalidArgument, nodeTimeout, ttl)
	}
	return nil
}

// defaultNodeTimeout derives the per-node timeout from the TTL when the user
// set none: 1% of the TTL, kept within [20 ms, 1 s]. The spec suggests 5–50 ms
// for a 10 s TTL; the floor leaves room for a loaded machine, since a node that
// times out only costs a vote, never safety. It never exceeds half the TTL.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/100, 20*time.Millisecond), time.Second, ttl/2)
}
