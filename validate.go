package redlock

// Validation a caller can run before contacting any node, with the rules
// and the errors of the calls themselves.

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// CheckTTL reports, without contacting a node, whether a lock of the given
// TTL can be acquired and kept alive with opts: it returns the error Acquire
// (and TryAcquire) would return, else the one KeepAlive (and Do) would, else
// nil. Give it the Client's options (New, Dial) followed by the call's
// (Options and HoldOptions); they apply in that order, as in the calls.
// Every error wraps ErrInvalidArgument (errors.Is) and names the failed rule
// with the calls' text:
//
//   - an option's own check (a nil option, a drift factor outside [0, 1), a
//     non-positive per-node timeout or extension interval, …);
//   - ttl is a whole number of milliseconds (Redis PX), at least 1 ms;
//   - ttl − Drift(ttl, driftFactor) − the per-node timeout leaves at least
//     1 ms of validity (see WithNodeTimeout); the error names the smallest
//     usable TTL;
//   - the retention (WithRetention) is at least ttl and the quarantine
//     (WithQuarantine); the minimum hold (WithMinHold) at most ttl; the
//     extension interval (default ttl/3) below ttl − Drift(ttl, driftFactor).
//
// A nil result does not promise that Acquire succeeds: the nodes decide that.
func CheckTTL(ttl time.Duration, opts ...DoOption) error {
	cfg, hold := defaultConfig(), holdConfig{}
	if err := applyOptions(opts, &cfg, &hold); err != nil {
		return err
	}
	// The checks of Client.acquire, then those KeepAlive adds, in their
	// order, so that the first failing rule gives the calls' error.
	if err := cfg.checkLock(ttl); err != nil {
		return err
	}
	if err := cfg.checkMinHold(ttl); err != nil {
		return err
	}
	_, err := hold.intervalFor(ttl, cfg.driftFactor)
	return err
}

// MaxKeyLen is the longest lock key, in bytes (the key as passed, without
// the prefix of WithKeyPrefix), that Acquire, TryAcquire, Do and Inspect
// accept; a longer key gives ErrInvalidArgument before any node is
// contacted. A lock key names a resource: 4 KiB leaves room for any name
// while keeping the keys, the scripts' arguments and the errors that name
// the key small.
const MaxKeyLen = 4096

// checkKey checks a lock key (as passed, prefix the Client's key prefix)
// before any node is asked, and returns its name on the nodes.
func checkKey(key, prefix string) (name string, err error) {
	switch {
	case key == "":
		return "", fmt.Errorf("%w: empty key", ErrInvalidArgument)
	case len(key) > MaxKeyLen:
		return "", fmt.Errorf("%w: key %s is longer than %d bytes (MaxKeyLen)", ErrInvalidArgument, keyText(key), MaxKeyLen)
	}
	name = prefix + key
	if err := checkKeyName(name); err != nil {
		return "", err
	}
	return name, nil
}

// keyTextLen is the longest key that errors and logs show whole; of a
// longer one they show its first keyTextPrefix bytes and its length.
const (
	keyTextLen    = 64
	keyTextPrefix = 48
)

// keyText quotes key for an error: whole when it is at most keyTextLen
// bytes long, else its first keyTextPrefix bytes (cut at a character
// boundary) and its length, such as "lock:aaaa"… (5000 bytes).
func keyText(key string) string {
	if len(key) <= keyTextLen {
		return strconv.Quote(key)
	}
	return strconv.Quote(key[:keyCut(key)]) + "… (" + strconv.Itoa(len(key)) + " bytes)"
}

// keyAttr is keyText for a log line's key attribute, which the handler
// quotes as it needs: lock:aaaa… (5000 bytes).
func keyAttr(key string) string {
	if len(key) <= keyTextLen {
		return key
	}
	return key[:keyCut(key)] + "… (" + strconv.Itoa(len(key)) + " bytes)"
}

// keyCut returns where the prefix of a long key that errors and logs show
// ends: keyTextPrefix bytes, or fewer to cut at a character boundary.
func keyCut(key string) int {
	cut := keyTextPrefix
	for cut > 0 && !utf8.RuneStart(key[cut]) {
		cut--
	}
	return cut
}
