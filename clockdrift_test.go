package redlock_test

import (
	"context"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The drift allowance has a fixed 2 ms term, Redis's 1 ms expiry precision
// plus 1 ms for the client's clock (see Drift); some other Redlock libraries
// leave it out.
func TestDrift(t *testing.T) {
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration
	}{
		{10 * time.Second, 0.01, 102 * time.Millisecond},
		{time.Second, 0.01, 12 * time.Millisecond},
		{30 * time.Second, 0.01, 302 * time.Millisecond},
		{100 * time.Millisecond, 0.01, 3 * time.Millisecond},
		{10 * time.Second, 0, 2 * time.Millisecond},
		{10 * time.Second, 0.05, 502 * time.Millisecond},
		{time.Millisecond, 0.01, 2*time.Millisecond + 10*time.Microsecond},
	} {
		assert.Equal(t, tc.want, redlock.Drift(tc.ttl, tc.factor), "Drift(%v, %g)", tc.ttl, tc.factor)
	}
	assert.Equal(t, 0.01, redlock.DefaultDriftFactor)
}

func TestValidity(t *testing.T) {
	for _, tc := range []struct {
		ttl, elapsed time.Duration
		factor       float64
		want         time.Duration
	}{
		{10 * time.Second, 0, 0.01, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, time.Second, 0.01, 9*time.Second - 102*time.Millisecond},
		{10 * time.Second, 30 * time.Millisecond, 0.01, 10*time.Second - 132*time.Millisecond},
		{100 * time.Millisecond, 97 * time.Millisecond, 0.01, 0},
		{100 * time.Millisecond, 98 * time.Millisecond, 0.01, -time.Millisecond},
		{100 * time.Millisecond, 200 * time.Millisecond, 0.01, -103 * time.Millisecond},
		{time.Second, 0, 0, time.Second - 2*time.Millisecond},
	} {
		assert.Equal(t, tc.want, redlock.ValidityLeft(tc.ttl, tc.elapsed, tc.factor), "Validity(%v, %v, %g)", tc.ttl, tc.elapsed, tc.factor)
	}
}

// The lock's validity is TTL − elapsed − drift, measured from before the
// first request: in fake time the figures are exact.
func TestAcquire_ValidityIsTTLMinusElapsedMinusDrift(t *testing.T) {
	for _, tc := range []struct {
		name        string
		opts        []redlock.Option
		factor      float64
		fenceAhead  bool // node 0's counter is ahead: the counters disagree
		wantElapsed time.Duration
	}{
		// A 30 ms quorum: the acquire round trip.
		{"no fencing", []redlock.Option{redlock.WithFencing(false)}, redlock.DefaultDriftFactor, false, 30 * time.Millisecond},
		// The granting nodes' counters agree: the token costs nothing more.
		{"fencing", nil, redlock.DefaultDriftFactor, false, 30 * time.Millisecond},
		// They disagree: plus the 30 ms write-back before the lock is handed out.
		{"fencing, counters disagree", nil, redlock.DefaultDriftFactor, true, 60 * time.Millisecond},
		{"drift factor 0.05", []redlock.Option{redlock.WithFencing(false), redlock.WithDriftFactor(0.05)}, 0.05, false, 30 * time.Millisecond},
		{"drift factor 0", []redlock.Option{redlock.WithFencing(false), redlock.WithDriftFactor(0)}, 0, false, 30 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newWarmCluster(t, 3, append(tc.opts, noGuard)...)
				if tc.fenceAhead {
					setCounterAhead(t, c.nodes[0], "report", time.Hour)
				}
				c.nodes[0].Slow(30 * time.Millisecond)
				c.nodes[1].Slow(30 * time.Millisecond)
				c.nodes[2].Slow(2 * time.Second) // not in the quorum

				start := time.Now()
				l, err := c.rl.Acquire(context.Background(), "report", ttl10s)
				require.NoError(t, err)
				elapsed := time.Since(start)
				assert.Equal(t, tc.wantElapsed, elapsed)
				assert.Equal(t, tc.wantElapsed, l.AcquiredAt().Sub(start))
				drift := redlock.Drift(ttl10s, tc.factor)
				assert.Equal(t, ttl10s-drift, l.ValidUntil().Sub(start))
				assert.Equal(t, ttl10s-tc.wantElapsed-drift, l.Validity())
				assert.Equal(t, redlock.ValidityLeft(ttl10s, elapsed, tc.factor), l.Validity())
				assert.Equal(t, 30*time.Millisecond, l.Nodes()[0].Latency)

				time.Sleep(time.Second)
				assert.Equal(t, ttl10s-tc.wantElapsed-drift-time.Second, l.Validity(), "validity counts down")
			})
		})
	}
}

// A lock whose acquisition took longer than its TTL allows must never be
// handed out, and the keys it set must go (Redlock spec, step 3: the lock is
// acquired only if the time elapsed is less than the validity time). The
// per-node timeout is the largest the TTL allows (100 − 3 − 96 = 1 ms left),
// so a single round trip always leaves validity: the boundary is reached
// with the fencing write-back's second round trip.
func TestAcquire_SlowerThanValidityIsRefused(t *testing.T) {
	const ttl = 100 * time.Millisecond // drift 3 ms
	for _, tc := range []struct {
		name     string
		delay    time.Duration
		opts     []redlock.Option
		wantErr  bool
		validity time.Duration
	}{
		{"one round trip just under the timeout: granted", 95 * time.Millisecond, []redlock.Option{redlock.WithFencing(false)}, false, 2 * time.Millisecond},
		// Two round trips (acquire, fencing write-back) of the delay each.
		{"validity 1 ms: granted", 48 * time.Millisecond, nil, false, time.Millisecond},
		{"validity 0: refused", 48500 * time.Microsecond, nil, true, 0},
		{"validity -1 ms: refused", 49 * time.Millisecond, nil, true, 0},
		{"slower than the ttl", 60 * time.Millisecond, nil, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newWarmCluster(t, 3, redlock.WithNodeTimeout(96*time.Millisecond))
				if len(tc.opts) == 0 { // no two nodes' counters agree
					setCounterAhead(t, c.nodes[0], "report", time.Hour)
					setCounterAhead(t, c.nodes[1], "report", 2*time.Hour)
				}
				for _, nd := range c.nodes {
					if len(tc.opts) > 0 {
						nd.SlowAcquire(tc.delay) // releases are not delayed
					} else {
						nd.Slow(tc.delay)
					}
				}

				l, err := c.rl.TryAcquire(context.Background(), "report", ttl, tc.opts...)
				if !tc.wantErr {
					require.NoError(t, err)
					assert.Equal(t, tc.validity, l.Validity())
					require.NoError(t, l.Release(context.Background()))
					return
				}
				assert.Nil(t, l)
				require.ErrorIs(t, err, redlock.ErrNotAcquired)
				qe := quorumError(t, err)
				assert.GreaterOrEqual(t, qe.Granted, qe.Quorum, "a quorum granted, but too late")
				assert.ErrorContains(t, qe.Cause, "validity")
				c.requireNoKey(t, "report")
				require.NoError(t, c.rl.Close())
				c.requireGone(t, "report")
			})
		})
	}
}

// setCounterAhead puts key's fencing counter on n by d (in microseconds)
// ahead of the clock, as if n had granted more often than the others: the
// next acquisition's counters disagree and need a write-back.
func setCounterAhead(t testing.TB, n *testNode, key string, d time.Duration) {
	t.Helper()
	ahead := time.Now().Add(d).UnixMicro()
	require.NoError(t, n.m.Set("{"+key+"}:fence", strconv.FormatInt(ahead, 10)))
}
