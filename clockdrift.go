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

// validityLeft returns how long a lock stays trusted after an acquisition or
// extension whose first request was sent `elapsed` ago:
// ttl − elapsed − Drift(ttl, driftFactor) (Lock.Validity counts it down).
// Zero or negative means the lock must not be used: it may already have
// expired on some node.
func validityLeft(ttl, elapsed time.Duration, driftFactor float64) time.Duration {
	return ttl - elapsed - Drift(ttl, driftFactor)
}

// minValidity is the validity a TTL must still leave after the drift
// allowance and one whole per-node timeout. An acquisition whose slowest
// counted node answers just in time has used one per-node timeout (more with
// the fencing write-back); a lock left with less than Redis's 1 ms expiry
// precision could not be used for anything, so the TTL is useless.
const minValidity = time.Millisecond

// checkTTL reports an error when ttl cannot leave validity after one
// per-node timeout: it must be a whole number of milliseconds of at least
// 1 ms (Redis PX), and ttl − Drift(ttl) − nodeTimeout must be at least
// minValidity. The error names the smallest TTL that passes with the same
// drift factor and per-node timeout.
func checkTTL(ttl time.Duration, driftFactor float64, nodeTimeout time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("%w: ttl %v is below Redis's 1 ms expiry precision", ErrInvalidArgument, ttl)
	}
	if ttl%time.Millisecond != 0 {
		// The nodes get whole milliseconds (PX): a fraction would be cut
		// off there but counted in the validity time.
		return fmt.Errorf("%w: ttl %v is not a whole number of milliseconds", ErrInvalidArgument, ttl)
	}
	if !ttlUsable(ttl, driftFactor, nodeTimeout) {
		least := "none (the drift factor is too close to 1, or the per-node timeout too long)"
		if m, ok := minTTL(driftFactor, nodeTimeout); ok {
			least = m.String()
		}
		return fmt.Errorf("%w: ttl %v leaves no validity after the clock drift allowance %v (ttl × %g + 2 ms) and one per-node timeout %v (at least %v must remain); the smallest usable ttl with this drift factor and per-node timeout is %s (a shorter per-node timeout, WithNodeTimeout, allows shorter TTLs)",
			ErrInvalidArgument, ttl, Drift(ttl, driftFactor), driftFactor, nodeTimeout, minValidity, least)
	}
	return nil
}

// ttlUsable reports whether ttl leaves at least minValidity after the drift
// allowance and one per-node timeout.
func ttlUsable(ttl time.Duration, driftFactor float64, nodeTimeout time.Duration) bool {
	return ttl-Drift(ttl, driftFactor)-nodeTimeout >= minValidity
}

// minTTL returns the smallest whole-millisecond TTL that ttlUsable accepts
// for a fixed per-node timeout; false if it would not fit a Duration.
func minTTL(driftFactor float64, nodeTimeout time.Duration) (time.Duration, bool) {
	// ttl × (1 − factor) ≥ nodeTimeout + 2 ms + minValidity, up to Drift's
	// rounding: start a little below and step up. The sum is taken in
	// floating point: a per-node timeout near the largest Duration would
	// wrap around to a negative TTL.
	est := (float64(nodeTimeout) + float64(expiryPrecision+minValidity)) / (1 - driftFactor)
	if est > float64(time.Duration(1<<62)) {
		return 0, false
	}
	ttl := max(time.Duration(est).Truncate(time.Millisecond)-2*time.Millisecond, time.Millisecond)
	for !ttlUsable(ttl, driftFactor, nodeTimeout) {
		ttl += time.Millisecond
	}
	return ttl, true
}

// defaultNodeTimeout derives the per-node timeout from the TTL when the user
// set none: 1% of the TTL, kept within [100 ms, 1 s]. The spec suggests 5–50 ms
// for a 10 s TTL on a quiet network; the floor leaves room for a busy client
// machine (on 2 shared cores a process that is not scheduled for tens of
// milliseconds is common, and 20 ms reported healthy nodes timed out), since a
// node that times out only costs a vote, never safety. It counts from when a
// call has a connection (internal/nodecall: Queue), so the client's own queue is not in
// it. It does not shrink for short TTLs (a timeout below what a node needs to
// answer fails every vote): checkTTL rejects a TTL that the timeout would
// leave without validity, so the shortest TTL with the defaults is 105 ms.
func defaultNodeTimeout(ttl time.Duration) time.Duration {
	return min(max(ttl/100, 100*time.Millisecond), time.Second)
}
