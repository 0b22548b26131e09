package bench

// Cases 8 and 9: a burst of acquisitions on free keys (does the
// client's own queueing make healthy nodes look timed out?) and the memory
// one long Acquire holds while it keeps failing.

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/d3b93e30/redlock"
)

const (
	// burstSize is how many goroutines start acquiring at the same instant.
	burstSize = 200
	// burstNodes is the number of redis-server nodes of the burst case.
	burstNodes = 3
	// memAttempts is how many failed attempts the memory case makes in one
	// Acquire; the heap is measured after memFrom and after memAttempts.
	// Until some hundreds of attempts the Go runtime still adds OS threads,
	// goroutine descriptors and their profiling buffers once (allocm, malg,
	// allgadd in a heap profile: 20-30 KB, whatever the number of attempts),
	// so the first reading is taken after that.
	memAttempts = 3500
	memFrom     = 1000
)

// dialOurs returns ours over srv with the library's defaults, the
// cluster's longest TTL stated (WithQuarantine(LongestTTL)), plus opts (no
// per-node timeout: it derives from the TTL).
func dialOurs(b *testing.B, srv []*Server, opts ...redlock.Option) *redlock.Client {
	b.Helper()
	urls := make([]string, len(srv))
	for i, s := range srv {
		urls[i] = "redis://" + s.Addr()
	}
	c, err := redlock.Dial(urls, append([]redlock.Option{redlock.WithQuarantine(LongestTTL)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkBurst: 200 goroutines, released at the same instant, each
// acquire its own free key (Acquire, default options and retry policy) on 3
// nodes; once all have returned, the locks are released (outside the timer)
// and the next burst starts. One b.N iteration is one burst. Reported:
// first-try-% (acquisitions that succeeded on their first attempt, of all
// calls), attempts/burst (attempts of all calls, failed ones included),
// max-attempts (most attempts of one call), timedout/burst (node results
// reported timed out in acquisition attempts: every node is healthy and
// local, so each one is the client's own queueing), burst-ms (wall time of
// one burst, p50 over bursts), fails (calls that did not acquire within
// 30 s) and rel-fails (releases that failed otherwise than ErrNotHeld).
// ttl=2s is a short TTL (per-node timeout 100 ms, the default's floor);
// ttl=15s (150 ms) is the control.
func BenchmarkBurst(b *testing.B) {
	srv := nodes(b, burstNodes)
	for _, ttl := range []time.Duration{2 * time.Second, 15 * time.Second} {
		b.Run(fmt.Sprintf("ttl=%v/ours", ttl), func(b *testing.B) {
			burst(b, srv, ttl)
		})
	}
}

func burst(b *testing.B, srv []*Server, ttl time.Duration) {
	b.ReportAllocs()
	startClean(b, srv)
	var timedOut atomic.Int64
	c := dialOurs(b, srv, redlock.WithObserver(redlock.ObserverFunc(func(e redlock.Event) {
		if e.Op != redlock.OpAcquire {
			return
		}
		for _, n := range e.Nodes {
			if n.Outcome == redlock.OutcomeTimedOut {
				timedOut.Add(1)
			}
		}
	})))
	defer c.Close()
	// Warm up (scripts loaded, one connection per node), one call at a time.
	for i := range 10 {
		l, err := c.TryAcquire(context.Background(), fmt.Sprintf("bench:burst:warm:%d", i), ttl)
		if err != nil {
			b.Fatalf("warm-up: %v", err)
		}
		if err := l.Release(context.Background()); err != nil {
			b.Fatalf("warm-up: %v", err)
		}
	}
	timedOut.Store(0)
	keys := make([][]string, b.N)
	for it := range keys {
		keys[it] = make([]string, burstSize)
		for g := range keys[it] {
			keys[it][g] = fmt.Sprintf("bench:burst:%d:%03d", it, g)
		}
	}
	var (
		firstTry, attempts, fails int
		most                      int
		durs                      []time.Duration
		firstErr                  error
		relFails                  atomic.Int64
		relErrOnce                sync.Once
		relErr                    error
	)
	runtime.GC()
	b.ResetTimer()
	for it := range b.N {
		var (
			ready, wg sync.WaitGroup
			start     = make(chan struct{})
			locks     = make([]*redlock.Lock, burstSize)
			tries     = make([]int, burstSize)
			errs      = make([]error, burstSize)
		)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		ready.Add(burstSize)
		for g := range burstSize {
			wg.Go(func() {
				ready.Done()
				<-start
				l, err := c.Acquire(ctx, keys[it][g], ttl)
				if err != nil {
					errs[g] = err
					var qe *redlock.QuorumError
					if errors.As(err, &qe) {
						tries[g] = qe.Attempts
					}
					return
				}
				locks[g], tries[g] = l, l.Attempts()
			})
		}
		ready.Wait()
		t0 := time.Now()
		close(start)
		wg.Wait()
		durs = append(durs, time.Since(t0))
		cancel()
		b.StopTimer()
		for g := range burstSize {
			attempts += tries[g]
			most = max(most, tries[g])
			switch {
			case errs[g] != nil:
				fails++
				if firstErr == nil {
					firstErr = errs[g]
				}
			case tries[g] == 1:
				firstTry++
			}
		}
		// Release outside the timer, all at once too. A lock whose TTL ran
		// out during a long burst is no longer held: not counted. Other
		// failures (ErrNoQuorum: too many nodes timed out) are a result of
		// the case, counted in rel-fails; their keys stay until their TTL.
		var rel sync.WaitGroup
		for _, l := range locks {
			if l != nil {
				rel.Go(func() {
					if err := l.Release(context.Background()); err != nil && !errors.Is(err, redlock.ErrNotHeld) {
						relFails.Add(1)
						relErrOnce.Do(func() { relErr = err })
					}
				})
			}
		}
		rel.Wait()
		b.StartTimer()
	}
	b.StopTimer()
	if fails > 0 {
		b.Logf("%d of %d acquisitions failed; first error: %v", fails, b.N*burstSize, firstErr)
	}
	if relErr != nil {
		b.Logf("%d releases failed; first error: %v", relFails.Load(), relErr)
	}
	calls := float64(b.N * burstSize)
	b.ReportMetric(100*float64(firstTry)/calls, "first-try-%")
	b.ReportMetric(float64(attempts)/float64(b.N), "attempts/burst")
	b.ReportMetric(float64(most), "max-attempts")
	b.ReportMetric(float64(timedOut.Load())/float64(b.N), "timedout/burst")
	b.ReportMetric(ms(percentile(durs, 50)), "burst-ms")
	b.ReportMetric(float64(fails), "fails")
	b.ReportMetric(float64(relFails.Load()), "rel-fails")
	c.Close()
	checkStale(b, srv, nil)
}

// BenchmarkAcquireMemory: one Acquire on a key held by another client (3
// nodes) fails memAttempts times in a row, with no delay between attempts,
// then gives up. The live heap (after a GC) is read from inside the retry
// policy after attempt memFrom and after the last attempt, while the call is
// still running: heap-growth-KB is the difference, heap-B/attempt the same
// per attempt. A bounded Acquire grows by a few KB at most whatever the
// number of attempts. One b.N iteration is one such Acquire.
func BenchmarkAcquireMemory(b *testing.B) {
	srv := nodes(b, burstNodes)
	b.Run("ours", func(b *testing.B) {
		startClean(b, srv)
		const key = "bench:memwait"
		holder := dialOurs(b, srv)
		defer holder.Close()
		held, err := holder.TryAcquire(context.Background(), key, time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		waiter := dialOurs(b, srv)
		defer waiter.Close()
		var growth []float64
		heap := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapAlloc
		}
		b.ResetTimer()
		for range b.N {
			var h0, h1 uint64
			policy := redlock.RetryFunc(func(attempt int) (time.Duration, bool) {
				switch attempt {
				case memFrom:
					h0 = heap()
				case memAttempts:
					h1 = heap()
					return 0, false
				}
				return 0, true
			})
			_, err := waiter.Acquire(context.Background(), key, 10*time.Second, redlock.WithRetry(policy))
			var qe *redlock.QuorumError
			if !errors.As(err, &qe) || qe.Attempts != memAttempts {
				b.Fatalf("want %d failed attempts, got %v", memAttempts, err)
			}
			growth = append(growth, float64(int64(h1)-int64(h0)))
		}
		b.StopTimer()
		g := slices.Max(growth)
		b.ReportMetric(g/1024, "heap-growth-KB")
		b.ReportMetric(g/float64(memAttempts-memFrom), "heap-B/attempt")
		b.ReportMetric(float64(memAttempts), "attempts")
		if err := held.Release(context.Background()); err != nil {
			b.Errorf("release: %v", err)
		}
		holder.Close()
		waiter.Close()
		checkStale(b, srv, nil)
	})
}
