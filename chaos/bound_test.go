package chaos

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
)

// RateBounds gives the exact one-sided 95 % Clopper–Pearson bounds: the
// published values (1 in 10 → 39.4 %, 1 in 100 → 4.66 %, 2 in 100 →
// 6.16 %), the closed forms for 0 failures (1 − 0.05^(1/n), about 3/n) and
// for n − 1 failures (0.95^(1/n)), values checked with exact rational
// arithmetic (3 in 30, 5 in 300), and the symmetry lower(k, n) =
// 1 − upper(n − k, n).
func TestRateBounds_KnownValues(t *testing.T) {
	for _, c := range []struct {
		k, n  int
		upper float64
	}{
		{0, 300, 1 - math.Pow(0.05, 1.0/300)}, // 0.99 %
		{0, 30, 1 - math.Pow(0.05, 1.0/30)},
		{0, 1, 0.95},
		{1, 10, 0.3941633},
		{1, 100, 0.0465598},
		{2, 100, 0.0616192},
		{3, 30, 0.2385979},
		{5, 300, 0.0347222},
		{9, 10, math.Pow(0.95, 0.1)},
		{29, 30, math.Pow(0.95, 1.0/30)},
		{30, 30, 1},
	} {
		lower, upper := RateBounds(c.k, c.n)
		assert.InDelta(t, c.upper, upper, 1e-6, "upper bound of %d in %d", c.k, c.n)
		wantLower := 0.0
		if c.k > 0 {
			_, u := RateBounds(c.n-c.k, c.n)
			wantLower = 1 - u
		}
		assert.InDelta(t, wantLower, lower, 1e-12, "lower bound of %d in %d", c.k, c.n)
		assert.LessOrEqual(t, lower, float64(c.k)/float64(c.n))
		assert.GreaterOrEqual(t, upper, float64(c.k)/float64(c.n))
	}
	_, upper := RateBounds(0, 300)
	assert.Less(t, upper, 0.01, "0 in 300 bounds the rate below 1 %")
	assert.InDelta(t, 3.0/300, upper, 0.0002, "the rule of three")
	lower, _ := RateBounds(300, 300)
	assert.InDelta(t, math.Pow(0.05, 1.0/300), lower, 1e-12, "300 in 300: at least 99 %")
}

// The defining property holds at the bound, for large n too: P(X ≤ k) at
// the upper bound is 5 %.
func TestRateBounds_DefiningProperty(t *testing.T) {
	for _, c := range [][2]int{{1, 2}, {7, 40}, {50, 3000}, {400, 10000}} {
		_, upper := RateBounds(c[0], c[1])
		assert.InDelta(t, 0.05, binomialCDF(c[0], c[1], upper), 1e-9, "%d in %d", c[0], c[1])
	}
}

// Input that gives no information gives the widest bounds, never a panic.
func TestRateBounds_BadInput(t *testing.T) {
	for _, c := range [][2]int{{0, 0}, {-1, 10}, {11, 10}, {0, -5}} {
		lower, upper := RateBounds(c[0], c[1])
		assert.Equal(t, [2]float64{0, 1}, [2]float64{lower, upper}, "%v", c)
	}
}
