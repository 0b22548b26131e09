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
