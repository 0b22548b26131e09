package redlock

// The minimum hold: a released lock stays taken until a set time after it
// was acquired, so that hosts running the same schedule run a short job once
// per tick.

import (
	"fmt"
	"strconv"
	"time"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// WithMinHold makes Release leave the lock taken until d after it was
// acquired (AcquiredAt of the acquisition, not of an extension), even when
// the work ended sooner, but never past the released handle's ValidUntil (a
// Lease's latest). Until then Release shortens the keys, where they still
// hold this lock's owner value, to expire at that time (never lengthening
// them) instead of deleting them, with a delete's results and waiting; the
// lock's Validity ends at once. Waiters find the lock free at their next
// retry (no release message). For Acquire, TryAcquire and Do.
//
// Hosts that run one schedule and take the lock per tick then run a short
// job once per tick: a host whose tick fires up to d after the first one's
// finds the lock taken. The skew tolerated is the smaller of d and the
// period minus d. 0, the default, is no hold. A negative d, or one longer
// than the TTL (from Acquire, TryAcquire, Do, CheckTTL), gives
// ErrInvalidArgument.
func WithMinHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: minimum hold %v must not be negative", ErrInvalidArgument, d)
		}
		c.minHold = d
		return nil
	}
}

// checkMinHold reports an error when the minimum hold is longer than ttl:
// the keys would expire before it ends.
func (c config) checkMinHold(ttl time.Duration) error {
	if c.minHold > ttl {
		return fmt.Errorf("%w: minimum hold %v is longer than the ttl %v: the lock cannot be held past its validity (use a longer ttl)", ErrInvalidArgument, c.minHold, ttl)
	}
	return nil
}

// holdCall returns Release's call at now while the minimum hold lasts: the
// owner-checked shortening of the keys to the time left of the hold
// (holdScript), rounded up to Redis's milliseconds but never past the
// validity deadline. It returns nil when no whole millisecond of the hold is
// left within the validity: Release then deletes the keys.
func (l *Lock) holdCall(now time.Time) *nodecall.ScriptCall {
	hold := ceilMillis(l.holdUntil.Sub(now))
	valid := l.validUntil.Sub(now).Truncate(time.Millisecond)
	left := min(hold, valid)
	if left < time.Millisecond {
		return nil
	}
	ms := strconv.FormatInt(left.Milliseconds(), 10)
	if l.vouch {
		return nodecall.NewScriptCallBoxed(holdScript, l.keys, l.keyArgs, l.ownerArg, ms, strconv.FormatUint(l.token, 10))
	}
	return nodecall.NewScriptCallBoxed(holdScript, l.keys[:1], l.keyArgs[:1], l.ownerArg, ms)
}

// ceilMillis rounds d up to a whole number of milliseconds.
func ceilMillis(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r > 0 {
		return d - r + time.Millisecond
	}
	return d
}
