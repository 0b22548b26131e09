package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/d3b93e30/redlock"
)

// multiRing is how many key sets BenchmarkMultiLock cycles through: each is
// used once untimed first, so that every key's amnesia guard epoch is
// trusted and the timed operations decide at the majority, as in case 1.
const multiRing = 256

// BenchmarkMultiLock measures a multi-key lock's acquire + release beside
// one key's, on 5 redis-server nodes, one goroutine, default settings
// (fencing and the amnesia guard on): "one-key" is Client.Acquire,
// "multi-1" AcquireMulti of one key, "multi-4" AcquireMulti of four. The
// target (benchtable): multi-4's p50 within 1.2 × one-key's.
func BenchmarkMultiLock(b *testing.B) {
	srv := nodes(b, 5)
	for _, c := range []struct {
		name string
		k    int
	}{{"one-key", 0}, {"multi-1", 1}, {"multi-4", 4}} {
		b.Run(c.name, func(b *testing.B) {
			rl, err := redlock.Dial(addrsOf(srv))
			if err != nil {
				b.Fatal(err)
			}
			defer rl.Close()
			ctx := context.Background()
			sets := make([][]string, multiRing)
			for i := range sets {
				for j := range max(c.k, 1) {
					sets[i] = append(sets[i], fmt.Sprintf("bench-multi-%s:%d:%d", c.name, i, j))
				}
			}
			op := func(keys []string) error {
				if c.k == 0 {
					l, err := rl.TryAcquire(ctx, keys[0], 10*time.Second)
					if err != nil {
						return err
					}
					return l.Release(ctx)
				}
				m, err := rl.TryAcquireMulti(ctx, keys, 10*time.Second)
				if err != nil {
					return err
				}
				return m.Release(ctx)
			}
			for _, s := range sets {
				if err := op(s); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				if err := op(sets[i%multiRing]); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(us(percentile(lat, 50)), "p50-us")
			b.ReportMetric(us(percentile(lat, 99)), "p99-us")
		})
	}
}
