package bench

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/d3b93e30/redlock"
)

// BenchmarkRWLock measures the read/write lock on 5 redis-server nodes,
// default settings (fencing and the amnesia guard on), one Client per
// goroutine as separate processes would have:
//
//   - readers16: 16 readers loop RLock + Release at once; reads/s is the
//     rate of read locks taken (b.N counts them);
//   - handoff: 2 writers loop Lock + Release on one name; ns/op is one
//     write lock taken and released while the other writer waits for it;
//   - writer-wait: 16 readers loop RLock, hold 5 ms, Release, while one
//     writer loops Lock, hold 1 ms, Release; ns/op is the writer's mean wait,
//     p50-wait-ms and p90-wait-ms its median and 90th percentile,
//     max-wait-ms its longest (b.N counts writes). The longest includes the
//     first wait of each round's fresh Client, which opens its pub/sub
//     connections then.
func BenchmarkRWLock(b *testing.B) {
	srv := nodes(b, 5)
	ctx := context.Background()
	dial := func(b *testing.B) *redlock.RWMutex {
		rl, err := redlock.Dial(addrsOf(srv), redlock.WithQuarantine(LongestTTL))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = rl.Close() })
		rw, err := rl.RWMutex("bench-rw")
		if err != nil {
			b.Fatal(err)
		}
		// the name's history: every epoch trusted
		l, err := rw.Lock(ctx, 10*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
		return rw
	}
	b.Run("readers16", func(b *testing.B) {
		rws := make([]*redlock.RWMutex, 16)
		for i := range rws {
			rws[i] = dial(b)
		}
		var left atomic.Int64
		left.Store(int64(b.N))
		b.ResetTimer()
		start := time.Now()
		var wg sync.WaitGroup
		for _, rw := range rws {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					l, err := rw.RLock(ctx, 10*time.Second)
					if err != nil {
						b.Error(err)
						return
					}
					_ = l.Release(ctx)
				}
			})
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "reads/s")
	})
	b.Run("handoff", func(b *testing.B) {
		rws := []*redlock.RWMutex{dial(b), dial(b)}
		var left atomic.Int64
		left.Store(int64(b.N))
		b.ResetTimer()
		var wg sync.WaitGroup
		for _, rw := range rws {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					l, err := rw.Lock(ctx, 10*time.Second)
					if err != nil {
						b.Error(err)
						return
					}
					_ = l.Release(ctx)
				}
			})
		}
		wg.Wait()
	})
	b.Run("writer-wait", func(b *testing.B) {
		readers := make([]*redlock.RWMutex, 16)
		for i := range readers {
			readers[i] = dial(b)
		}
		writer := dial(b)
		rctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for _, rw := range readers {
			wg.Go(func() {
				for rctx.Err() == nil {
					l, err := rw.RLock(rctx, 10*time.Second)
					if err != nil {
						continue
					}
					time.Sleep(5 * time.Millisecond)
					_ = l.Release(ctx)
				}
			})
		}
		time.Sleep(100 * time.Millisecond) // the readers are looping
		waits := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for range b.N {
			t0 := time.Now()
			l, err := writer.Lock(ctx, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			waits = append(waits, time.Since(t0))
			time.Sleep(time.Millisecond)
			_ = l.Release(ctx)
		}
		b.StopTimer()
		stop()
		wg.Wait()
		b.ReportMetric(float64(slices.Max(waits).Microseconds())/1000, "max-wait-ms")
		slices.Sort(waits)
		b.ReportMetric(float64(waits[len(waits)/2].Microseconds())/1000, "p50-wait-ms")
		b.ReportMetric(float64(waits[len(waits)*9/10].Microseconds())/1000, "p90-wait-ms")
	})
}
