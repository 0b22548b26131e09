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
// (fencing and the amnesia guard on): "one" is Client.Acquire of one key,
// "multi1" AcquireMulti of one key, "multi4" AcquireMulti of four. The three
// run interleaved, one operation of each in turn, so that the machine's
// drifting speed (other processes) weighs on all three alike; b.N counts
// rounds of three operations. The target (benchtable): multi4's p50 within
// 1.2 × one's.
func BenchmarkMultiLock(b *testing.B) {
	srv := nodes(b, 5)
	b.Run("interleaved", func(b *testing.B) {
		rl, err := redlock.Dial(addrsOf(srv), redlock.WithQuarantine(LongestTTL))
		if err != nil {
			b.Fatal(err)
		}
		defer rl.Close()
		ctx := context.Background()
		kinds := []struct {
			name string
			k    int
		}{{"one", 0}, {"multi1", 1}, {"multi4", 4}}
		sets := make([][][]string, len(kinds))
		for c, kind := range kinds {
			sets[c] = make([][]string, multiRing)
			for i := range multiRing {
				for j := range max(kind.k, 1) {
					sets[c][i] = append(sets[c][i], fmt.Sprintf("bench-multi-%s:%d:%d", kind.name, i, j))
				}
			}
		}
		op := func(c int, keys []string) error {
			if kinds[c].k == 0 {
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
		for c := range kinds {
			for _, s := range sets[c] {
				if err := op(c, s); err != nil {
					b.Fatal(err)
				}
			}
		}
		lat := make([][]time.Duration, len(kinds))
		b.ResetTimer()
		for i := range b.N {
			for c := range kinds {
				start := time.Now()
				if err := op(c, sets[c][i%multiRing]); err != nil {
					b.Fatal(err)
				}
				lat[c] = append(lat[c], time.Since(start))
			}
		}
		b.StopTimer()
		for c, kind := range kinds {
			b.ReportMetric(us(percentile(lat[c], 50)), kind.name+"-p50-us")
			b.ReportMetric(us(percentile(lat[c], 99)), kind.name+"-p99-us")
		}
	})
}
