package redlock

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// RetryPolicy decides whether and when Acquire makes another attempt after a
// failed one. The Redlock spec asks for a random delay between attempts, so
// that clients contending for the same key do not keep splitting the vote in
// lock step.
type RetryPolicy interface {
	// NextRetry is called after attempt number `attempt` (1 for the first)
	// failed. It returns how long to wait before the next attempt, and false
	// to stop trying. It is called from one goroutine per Acquire, but one
	// policy value may serve many concurrent Acquire calls.
	NextRetry(attempt int) (delay time.Duration, ok bool)
}

// RetryFunc adapts a function to a RetryPolicy.
type RetryFunc func(attempt int) (time.Duration, bool)

// NextRetry calls f(attempt).
func (f RetryFunc) NextRetry(attempt int) (time.Duration, bool) { return f(attempt) }

// NoRetry makes exactly one attempt: Acquire fails at once when the key is
// held. TryAcquire uses it.
func NoRetry() RetryPolicy {
	return RetryFunc(func(int) (time.Duration, bool) { return 0, false })
}

// LinearRetry waits delay plus a uniformly random extra of up to jitter
// between attempts, and makes at most tries attempts in all (0 = no limit but
// the context's). Negative values make WithRetry return ErrInvalidArgument.
func LinearRetry(delay, jitter time.Duration, tries int) RetryPolicy {
	return linearRetry{delay: delay, jitter: jitter, tries: tries}
}

type linearRetry struct {
	delay, jitter time.Duration
	tries         int
}

func (p linearRetry) NextRetry(attempt int) (time.Duration, bool) {
	if p.tries > 0 && attempt >= p.tries {
		return 0, false
	}
	return p.delay + randUpTo(p.jitter), true
}

func (p linearRetry) validate() error {
	if p.delay < 0 || p.jitter < 0 || p.tries < 0 {
		return fmt.Errorf("%w: LinearRetry(%v, %v, %d): delay, jitter and tries must not be negative", ErrInvalidArgument, p.delay, p.jitter, p.tries)
	}
	return nil
}

// ExponentialRetry waits a uniformly random time in [0, min(max, base×2^(n−1))]
// after the n-th failed attempt ("full jitter"), and makes at most tries
// attempts in all (0 = no limit but the context's). base must be positive and
// max at least base, or WithRetry returns ErrInvalidArgument.
func ExponentialRetry(base, max time.Duration, tries int) RetryPolicy {
	return exponentialRetry{base: base, max: max, tries: tries}
}

type exponentialRetry struct {
	base, max time.Duration
	tries     int
}

func (p exponentialRetry) NextRetry(attempt int) (time.Duration, bool) {
	if p.tries > 0 && attempt >= p.tries {
		return 0, false
	}
	ceil := p.max
	// Compare without shifting base up: base<<shift can overflow into a
	// negative ceiling, which would mean no delay at all.
	if shift := max(attempt-1, 0); shift < 63 && p.base < p.max>>shift {
		ceil = p.base << shift
	}
	return randUpTo(ceil), true
}

func (p exponentialRetry) validate() error {
	if p.base <= 0 || p.max < p.base || p.tries < 0 {
		return fmt.Errorf("%w: ExponentialRetry(%v, %v, %d): base must be positive, max at least base, tries not negative", ErrInvalidArgument, p.base, p.max, p.tries)
	}
	return nil
}

// DefaultRetry is the policy Acquire uses when none is set: full-jitter
// exponential backoff from 10 ms up to 250 ms, until the context ends.
//
// Its short first delays are there to notice a release soon. A waiting
// Acquire is also told of the release by the nodes (pub/sub, see Waiting in
// the package doc): with DefaultRetry, a waiter that is subscribed on a
// majority of nodes when its delay ends waits on until 125–250 ms (a
// uniformly random time in [max/2, max]) after its failed attempt, unless it
// is told first. The
// message is a hint: without it (no pub/sub, a lost message, a key that
// expired) the wait still ends by then. Policies other than DefaultRetry
// keep their delays as they are.
func DefaultRetry() RetryPolicy {
	return defaultRetry{exponentialRetry{base: 10 * time.Millisecond, max: 250 * time.Millisecond}}
}

// defaultRetry is DefaultRetry: ExponentialRetry(10ms, 250ms, 0), and
// queuedDelay.
type defaultRetry struct{ exponentialRetry }

// queuedDelay is how long after a failed attempt a waiter subscribed on a
// majority of nodes waits at most: uniformly random in [max/2, max].
func (p defaultRetry) queuedDelay() time.Duration {
	return p.max/2 + randUpTo(p.max-p.max/2)
}

// queuedDelay returns retry's longest wait for a waiter subscribed on a
// majority of nodes, or 0 for a policy that has none (its delay stands).
func queuedDelay(retry RetryPolicy) time.Duration {
	if p, ok := retry.(defaultRetry); ok {
		return p.queuedDelay()
	}
	return 0
}

func randUpTo(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	if d == math.MaxInt64 {
		return rand.N(d) // d+1 would overflow
	}
	return rand.N(d + 1)
}
