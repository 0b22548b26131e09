package chaos

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
)

// judgeFinal judges every window of j, as a soak does at its end.
func judgeFinal(j *keyJudge) SoakCounts {
	safe, _ := j.judge(time.Now(), true, func(time.Duration) bool { return false })
	return safe
}

// A soak's key judge sees what one oracle over the whole run would: an
// overlap, a stale write and tokens out of order between a hold that began
// in one window and one that began in the next, each counted once; and it
// drops the windows whose holds are done.
func TestKeyJudge_AcrossWindows(t *testing.T) {
	t.Run("no defect, windows dropped", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			j := newKeyJudge("k", time.Now())
			for i := range 40 {
				now := time.Now()
				h := j.acquired(i%3, uint64(i+1), now, now.Add(time.Second), time.Millisecond)
				h.write(uint64(i + 1))
				time.Sleep(100 * time.Millisecond)
				h.released(time.Now())
				time.Sleep(200 * time.Millisecond)
				safe, _ := j.judge(time.Now(), false, func(time.Duration) bool { return false })
				assert.Zero(t, safe.Defects())
			}
			assert.LessOrEqual(t, j.openWindows(), 3, "finished windows are dropped")
			c := judgeFinal(j)
			assert.Zero(t, c.Defects())
			assert.Zero(t, j.openWindows())
		})
	})
	t.Run("overlap across a window boundary", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			j := newKeyJudge("k", time.Now())
			var total SoakCounts
			now := time.Now()
			a := j.acquired(0, 1, now, now.Add(time.Hour), 0) // believes it holds for an hour
			a.write(1)
			time.Sleep(soakWindow + time.Second)
			now = time.Now()
			b := j.acquired(1, 2, now, now.Add(time.Second), 0) // a new window
			b.write(2)
			time.Sleep(100 * time.Millisecond)
			b.released(time.Now())
			time.Sleep(soakGrace + time.Second)
			a.released(time.Now())
			time.Sleep(soakGrace + time.Second)
			safe, _ := j.judge(time.Now(), false, func(time.Duration) bool { return false })
			total.add(safe)
			total.add(judgeFinal(j))
			assert.Equal(t, 1, total.Overlaps, "the pair is counted once")
			assert.Equal(t, 2, total.Holds)
		})
	})
	t.Run("stale write and tokens out of order across windows", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			j := newKeyJudge("k", time.Now())
			now := time.Now()
			a := j.acquired(0, 5, now, now.Add(100*time.Millisecond), 0)
			time.Sleep(soakWindow + time.Second) // a is past its validity, still running
			now = time.Now()
			b := j.acquired(1, 3, now, now.Add(time.Second), 0) // a lower token, later
			b.write(3)
			time.Sleep(100 * time.Millisecond)
			b.released(time.Now())
			time.Sleep(100 * time.Millisecond)
			a.write(5) // accepted (5 > 3) after a later holder's write: stale
			a.released(time.Now())
			c := judgeFinal(j)
			assert.Equal(t, 1, c.StaleAccepted)
			assert.Equal(t, 1, c.TokensOutOfOrder)
			assert.Equal(t, 0, c.Overlaps, "the believed intervals do not overlap")
			assert.Equal(t, 1, c.LateWriteOverlaps)
		})
	})
	t.Run("unsafe window", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			j := newKeyJudge("k", start)
			now := time.Now()
			j.acquired(0, 1, now, now.Add(time.Second), 0).released(now.Add(time.Second))
			j.acquired(1, 2, now, now.Add(time.Second), 0).released(now.Add(time.Second))
			safe, uns := j.judge(time.Now(), true, func(d time.Duration) bool { return d < time.Second })
			assert.Zero(t, safe.Overlaps)
			assert.Equal(t, 1, uns.Overlaps)
		})
	})
}

// The resource bounds: flat samples pass; goroutines or heap that keep
// growing after warm-up, or a node over the connection bound, fail; a run
// shorter than the warm-up is only checked for connections.
func TestBoundLeaks(t *testing.T) {
	samples := func(g func(i int) int, h func(i int) uint64) []SoakSample {
		var out []SoakSample
		for i := range 30 {
			out = append(out, SoakSample{T: time.Duration(i) * 10 * time.Second, Goroutines: g(i), HeapBytes: h(i), Conns: []int{100, 100}})
		}
		return out
	}
	flat := func(int) int { return 1000 }
	flatH := func(int) uint64 { return 50 << 20 }
	var maxConns int
	assert.Empty(t, boundLeaks(samples(flat, flatH), 200, &maxConns))
	assert.Equal(t, 100, maxConns)
	assert.Len(t, boundLeaks(samples(func(i int) int { return 1000 + 100*i }, flatH), 200, &maxConns), 1, "goroutines growing")
	assert.Len(t, boundLeaks(samples(flat, func(i int) uint64 { return uint64(50+10*i) << 20 }), 200, &maxConns), 1, "heap growing")
	assert.Len(t, boundLeaks(samples(flat, flatH), 99, &maxConns), 60, "every sample over the connection bound, on both nodes")
	short := samples(func(i int) int { return 1000 + 100*i }, flatH)[:3]
	assert.Empty(t, boundLeaks(short, 200, &maxConns), "20 s: no growth check")
}
