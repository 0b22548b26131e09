package redlock

// Validation a caller can run before contacting any node, with the rules
// and the errors of the calls themselves.

import (
	"time"
)

// CheckTTL reports whether a lock of the given TTL can be acquired and kept
// alive with opts, without contacting a node: it returns the error that
// Acquire (and TryAcquire) would return for ttl with opts, or else the one
// KeepAlive (and Do) would return for such a lock, and nil when neither
// would refuse it. Give it the options of the Client (New, Dial) followed by
// those of the call; they are applied in that order, as the calls do.
//
// Every error wraps ErrInvalidArgument (test it with errors.Is) and says
// which rule failed, with the same text as the calls:
//
//   - an option's own check (a nil option, a drift factor outside [0, 1), a
//     non-positive per-node timeout or extension interval, …);
//   - ttl must be a whole number of milliseconds (the nodes get Redis PX),
//     at least 1 ms;
//   - ttl − Drift(ttl, driftFactor) − the per-node timeout must leave at
//     least 1 ms of validity (the Redlock spec's validity time, see
//     WithNodeTimeout); the error names the smallest usable TTL;
//   - the retention (WithRetention) must be at least ttl and at least the
//     quarantine (WithQuarantine);
//   - the minimum hold (WithMinHold) must not be longer than ttl;
//   - the extension interval (WithExtendInterval, default ttl/3) must be
//     below the validity of a fresh lock, ttl − Drift(ttl, driftFactor).
//
// A nil result does not promise that Acquire succeeds: the nodes decide
// that.
func CheckTTL(ttl time.Duration, opts ...Option) error {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return err
	}
	// The checks of Client.acquire, then those KeepAlive adds, in their
	// order, so that the first failing rule gives the calls' error.
	if err := checkTTL(ttl, cfg.driftFactor, cfg.timeoutFor(ttl)); err != nil {
		return err
	}
	if err := cfg.checkRetention(ttl); err != nil {
		return err
	}
	if err := cfg.checkMinHold(ttl); err != nil {
		return err
	}
	_, err := cfg.hold.intervalFor(ttl, cfg.driftFactor)
	return err
}
