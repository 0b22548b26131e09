package chaos

import "math"

// Confidence is the confidence level of the rate bounds the harness
// reports (Result.RateUpper, Result.RateLower): each is a one-sided bound at
// this level.
const Confidence = 0.95

// RateBounds returns exact one-sided bounds, each at Confidence, on the
// probability p that a trial fails, given k failed trials in n
// (Clopper–Pearson): upper is the p at which k or fewer failures in n would
// happen with probability 1 − Confidence, lower the p at which k or more
// would. So 0 failures in 300 trials give upper = 1 − 0.05^(1/300) ≈ 1.0 %
// (about 3/n, the "rule of three") and lower = 0; n failures in n give
// upper = 1. It returns (0, 1), no information, when n < 1 or k is not in
// 0..n.
func RateBounds(k, n int) (lower, upper float64) {
	if n < 1 || k < 0 || k > n {
		return 0, 1
	}
	return 1 - upperBound(n-k, n), upperBound(k, n)
}

// upperBound returns the p in [k/n, 1] at which P(X ≤ k) = 1 − Confidence
// for X ~ Binomial(n, p), or 1 when k = n. P(X ≤ k) falls as p rises, so
// bisection finds it; 60 halvings leave an error below 1e-18.
func upperBound(k, n int) float64 {
	alpha := 1 - Confidence
	switch {
	case k >= n:
		return 1
	case k == 0:
		return 1 - math.Pow(alpha, 1/float64(n)) // P(X = 0) = (1−p)^n
	}
	lo, hi := float64(k)/float64(n), 1.0
	for range 60 {
		mid := (lo + hi) / 2
		if binomialCDF(k, n, mid) > alpha {
			lo = mid
		} else {
			hi = mid
		}
	}
	return (lo + hi) / 2
}

// binomialCDF returns P(X ≤ k) for X ~ Binomial(n, p), 0 < p < 1, summing
// the terms in logarithms so that large n neither overflows nor
// underflows a term that matters.
func binomialCDF(k, n int, p float64) float64 {
	lgN, _ := math.Lgamma(float64(n + 1))
	logP, logQ := math.Log(p), math.Log1p(-p)
	sum := 0.0
	for i := 0; i <= k; i++ {
		lgI, _ := math.Lgamma(float64(i + 1))
		lgNI, _ := math.Lgamma(float64(n - i + 1))
		sum += math.Exp(lgN - lgI - lgNI + float64(i)*logP + float64(n-i)*logQ)
	}
	return min(sum, 1)
}
