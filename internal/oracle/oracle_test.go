package oracle

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/fencing"
)

// plainStore accepts every write, as the chaos harness's plain resource does.
type plainStore struct{}

func (plainStore) Write(uint64, string) bool { return true }

// fencedStore refuses what fencing.Register refuses, as the chaos harness's FencedStore
// does.
type fencedStore struct{ g fencing.Register }

func (s *fencedStore) Write(token uint64, _ string) bool {
	return s.g.Do(token, func() error { return nil }) == nil
}

// oracleAt returns the instant ms milliseconds after o started.
func oracleAt(o *Oracle, ms int) time.Time {
	return o.Start().Add(time.Duration(ms) * time.Millisecond)
}

// oracleHold records a hold by client from ms a to validity ms v.
func oracleHold(o *Oracle, client int, token uint64, a, v int) HoldID {
	return o.Acquired(client, token, oracleAt(o, a), oracleAt(o, v), time.Millisecond, 1)
}

func TestOracleOverlapFound(t *testing.T) {
	o := NewOracle()
	h0 := oracleHold(o, 0, 0, 0, 100)
	h1 := oracleHold(o, 1, 0, 50, 150)
	r := o.Report()
	require.Equal(t, 1, r.Violations)
	require.Len(t, r.ViolationList, 1)
	v := r.ViolationList[0]
	assert.Equal(t, Violation{
		ClientA: 0, HoldA: h0, ClientB: 1, HoldB: h1,
		From: 50 * time.Millisecond, FromMS: 50, To: 100 * time.Millisecond, ToMS: 100,
		Believed: true,
	}, v)
	assert.Equal(t, 1, r.BelievedViolations)
	assert.Equal(t, 2, r.Acquisitions)
}

func TestOracleOverlapOrderIndependent(t *testing.T) {
	// The later-acquired hold is recorded first: HoldA is still the earlier one.
	o := NewOracle()
	late := oracleHold(o, 3, 0, 50, 150)
	early := oracleHold(o, 7, 0, 0, 100)
	r := o.Report()
	require.Equal(t, 1, r.Violations)
	v := r.ViolationList[0]
	assert.Equal(t, early, v.HoldA)
	assert.Equal(t, 7, v.ClientA)
	assert.Equal(t, late, v.HoldB)
	assert.Equal(t, 3, v.ClientB)
}

func TestOracleTouchingIsNotViolation(t *testing.T) {
	o := NewOracle()
	oracleHold(o, 0, 0, 0, 100)
	oracleHold(o, 1, 0, 100, 200)
	oracleHold(o, 2, 0, 200, 300)
	r := o.Report()
	assert.Zero(t, r.Violations)
	assert.Empty(t, r.ViolationList)
	assert.NotNil(t, r.ViolationList)
}

func TestOracleNestedAndManyOverlaps(t *testing.T) {
	o := NewOracle()
	oracleHold(o, 0, 0, 0, 1000)  // contains both others
	oracleHold(o, 1, 0, 100, 200) // overlaps 0
	oracleHold(o, 2, 0, 150, 300) // overlaps 0 and 1
	oracleHold(o, 3, 0, 1000, 1100)
	r := o.Report()
	require.Equal(t, 3, r.Violations)
	type pair struct{ a, b int }
	var got []pair
	for _, v := range r.ViolationList {
		got = append(got, pair{v.ClientA, v.ClientB})
	}
	assert.ElementsMatch(t, []pair{{0, 1}, {0, 2}, {1, 2}}, got)
	// Sorted by start of the overlap.
	assert.Equal(t, 100*time.Millisecond, r.ViolationList[0].From)
	assert.Equal(t, 150*time.Millisecond, r.ViolationList[1].From)
	last := r.ViolationList[2]
	assert.Equal(t, 150*time.Millisecond, last.From)
	assert.Equal(t, 200*time.Millisecond, last.To)
}

func TestOracleSameClientNeverViolation(t *testing.T) {
	o := NewOracle()
	a := oracleHold(o, 0, 0, 0, 100)
	oracleHold(o, 0, 0, 50, 150)
	o.Wrote(a, ResourcePlain, 0, true, oracleAt(o, 120))
	assert.Zero(t, o.Report().Violations)
}

func TestOracleReleaseShortensInterval(t *testing.T) {
	o := NewOracle()
	a := oracleHold(o, 0, 0, 0, 1000)
	o.Released(a, oracleAt(o, 100))
	oracleHold(o, 1, 0, 100, 1100) // starts exactly at the release
	b := oracleHold(o, 2, 0, 2000, 2100)
	o.Released(b, oracleAt(o, 5000)) // after validity: does not lengthen
	oracleHold(o, 3, 0, 2100, 2200)

	h := o.History()
	assert.Equal(t, 100*time.Millisecond, h.Holds[0].BelievedEnd)
	assert.Equal(t, 100*time.Millisecond, h.Holds[0].ActedEnd)
	assert.Equal(t, 2100*time.Millisecond, h.Holds[2].BelievedEnd)
	r := o.Report()
	assert.Zero(t, r.Violations)
	assert.Equal(t, 2, r.Releases)

	// A second release of the same hold is ignored: the first one counts.
	o2 := NewOracle()
	c := oracleHold(o2, 0, 0, 0, 1000)
	o2.Released(c, oracleAt(o2, 100))
	o2.Released(c, oracleAt(o2, 900))
	oracleHold(o2, 1, 0, 500, 1500)
	assert.Zero(t, o2.Report().Violations)
	assert.Equal(t, 1, o2.Report().Releases)
}

func TestOracleReleaseOverlapStillCounts(t *testing.T) {
	o := NewOracle()
	a := oracleHold(o, 0, 0, 0, 1000)
	o.Released(a, oracleAt(o, 300))
	oracleHold(o, 1, 0, 200, 1200)
	r := o.Report()
	require.Equal(t, 1, r.Violations)
	assert.Equal(t, 200*time.Millisecond, r.ViolationList[0].From)
	assert.Equal(t, 300*time.Millisecond, r.ViolationList[0].To)
}

// TestOracleLateWriteExtendsActedInterval is Kleppmann's GC pause: client 0
// pauses past its validity, client 1 acquires and writes, client 0 wakes up
// and writes with its old token.
func TestOracleLateWriteExtendsActedInterval(t *testing.T) {
	o := NewOracle()
	a := oracleHold(o, 0, 1, 0, 100)
	b := oracleHold(o, 1, 2, 120, 220)
	o.Wrote(b, ResourcePlain, 2, true, oracleAt(o, 130))
	o.Wrote(a, ResourcePlain, 1, true, oracleAt(o, 180))

	h := o.History()
	assert.Equal(t, 100*time.Millisecond, h.Holds[0].BelievedEnd)
	assert.Equal(t, 180*time.Millisecond, h.Holds[0].ActedEnd)
	assert.InDelta(t, 180.0, h.Holds[0].ActedEndMS, 1e-9)

	r := o.Report()
	require.Equal(t, 1, r.Violations)
	v := r.ViolationList[0]
	assert.Equal(t, a, v.HoldA)
	assert.Equal(t, b, v.HoldB)
	assert.Equal(t, 120*time.Millisecond, v.From)
	assert.Equal(t, 180*time.Millisecond, v.To)
	assert.False(t, v.Believed, "only the late write makes them overlap")
	assert.Zero(t, r.BelievedViolations)
	assert.Equal(t, 1, r.StaleWritesPlain)
}

func TestOracleWriteBeforeValidityEndDoesNotExtend(t *testing.T) {
	o := NewOracle()
	a := oracleHold(o, 0, 0, 0, 100)
	o.Wrote(a, ResourcePlain, 0, true, oracleAt(o, 50))
	oracleHold(o, 1, 0, 100, 200)
	h := o.History()
	assert.Equal(t, 100*time.Millisecond, h.Holds[0].ActedEnd)
	assert.Zero(t, o.Report().Violations)
}

func TestOracleStaleWritesPlainVersusFenced(t *testing.T) {
	o := NewOracle()
	plain, fenced := plainStore{}, &fencedStore{}
	write := func(h HoldID, tok uint64, ms int) {
		at := oracleAt(o, ms)
		o.Wrote(h, ResourcePlain, tok, plain.Write(tok, "x"), at)
		o.Wrote(h, ResourceFenced, tok, fenced.Write(tok, "x"), at)
	}
	a := oracleHold(o, 0, 1, 0, 100)
	write(a, 1, 10) // fine
	b := oracleHold(o, 1, 2, 120, 220)
	write(b, 2, 130)
	write(a, 1, 180) // stale: a was acquired before b
	write(b, 2, 200) // fine
	c := oracleHold(o, 2, 3, 300, 400)
	write(c, 3, 310)

	r := o.Report()
	assert.Equal(t, 1, r.StaleWritesPlain)
	assert.Zero(t, r.StaleWritesFenced, "the fenced resource rejected the stale write")
	assert.Equal(t, 1, r.RejectedWritesFenced)
	assert.Equal(t, ResourceStats{Writes: 5, Accepted: 5, Stale: 1}, r.Resources[ResourcePlain])
	assert.Equal(t, ResourceStats{Writes: 5, Accepted: 4, Rejected: 1}, r.Resources[ResourceFenced])
	assert.Equal(t, 10, r.Writes)
	assert.Zero(t, r.TokenOrderViolations)

	h := o.History()
	var staleAt []time.Duration
	for _, w := range h.Writes {
		if w.Stale {
			assert.Equal(t, ResourcePlain, w.Resource)
			staleAt = append(staleAt, w.At)
		}
	}
	assert.Equal(t, []time.Duration{180 * time.Millisecond}, staleAt)
}

func TestOracleStaleWriteFencedWithoutTokens(t *testing.T) {
	// Fencing off (token 0 everywhere): the fenced resource accepts the stale
	// write and the oracle must say so.
	o := NewOracle()
	fenced := &fencedStore{}
	a := oracleHold(o, 0, 0, 0, 100)
	b := oracleHold(o, 1, 0, 120, 220)
	o.Wrote(b, ResourceFenced, 0, fenced.Write(0, "b"), oracleAt(o, 130))
	o.Wrote(a, ResourceFenced, 0, fenced.Write(0, "a"), oracleAt(o, 180))
	r := o.Report()
	assert.Equal(t, 1, r.StaleWritesFenced)
	assert.Zero(t, r.RejectedWritesFenced)
	assert.Zero(t, r.TokenOrderViolations, "pairs of zero tokens are skipped")
}

func TestOracleStaleWritesOrderedByTime(t *testing.T) {
	// Recorded out of order: the oracle orders writes by their time.
	o := NewOracle()
	a := oracleHold(o, 0, 0, 0, 100)
	b := oracleHold(o, 1, 0, 50, 150)
	o.Wrote(b, ResourcePlain, 0, true, oracleAt(o, 90))
	o.Wrote(a, ResourcePlain, 0, true, oracleAt(o, 60)) // before b's write: not stale
	assert.Zero(t, o.Report().StaleWritesPlain)

	// Rejected writes never count as stale and do not move the high mark.
	o2 := NewOracle()
	a2 := oracleHold(o2, 0, 0, 0, 100)
	b2 := oracleHold(o2, 1, 0, 50, 150)
	o2.Wrote(b2, ResourcePlain, 0, false, oracleAt(o2, 60))
	o2.Wrote(a2, ResourcePlain, 0, true, oracleAt(o2, 70))
	assert.Zero(t, o2.Report().StaleWritesPlain)

	// Resources are judged separately.
	o3 := NewOracle()
	a3 := oracleHold(o3, 0, 0, 0, 100)
	b3 := oracleHold(o3, 1, 0, 50, 150)
	o3.Wrote(b3, ResourcePlain, 0, true, oracleAt(o3, 60))
	o3.Wrote(a3, "other", 0, true, oracleAt(o3, 70))
	r3 := o3.Report()
	assert.Zero(t, r3.StaleWritesPlain)
	assert.Zero(t, r3.Resources["other"].Stale)
}

// A write that takes time (real storage) is only stale after a later
// holder's accepted write that had returned before it started: writes whose
// spans overlap may have taken effect in either order.
func TestOracleStaleWritesNeedTheLaterWriteReturned(t *testing.T) {
	for name, tc := range map[string]struct {
		b     [2]int // b's write: start, end (ms)
		a     int    // a's write: start = end (ms)
		stale int
	}{
		"a starts while b's write is in flight": {b: [2]int{60, 80}, a: 70, stale: 0},
		"a starts as b's write returns":         {b: [2]int{60, 80}, a: 80, stale: 1},
		"a starts after b's write returned":     {b: [2]int{60, 80}, a: 90, stale: 1},
		"a before b's write":                    {b: [2]int{60, 80}, a: 55, stale: 0},
	} {
		t.Run(name, func(t *testing.T) {
			o := NewOracle()
			a := oracleHold(o, 0, 1, 0, 100)
			b := oracleHold(o, 1, 2, 50, 150)
			o.WroteSpan(b, ResourceFenced, 2, true, oracleAt(o, tc.b[0]), oracleAt(o, tc.b[1]))
			o.Wrote(a, ResourceFenced, 1, true, oracleAt(o, tc.a))
			assert.Equal(t, tc.stale, o.Report().StaleWritesFenced)
		})
	}
}

func TestOracleTokenOrderViolations(t *testing.T) {
	o := NewOracle()
	// Recorded out of acquisition order on purpose.
	oracleHold(o, 0, 5, 300, 350) // 4th
	oracleHold(o, 0, 1, 0, 50)    // 1st
	oracleHold(o, 1, 2, 100, 150) // 2nd
	oracleHold(o, 2, 2, 200, 250) // 3rd: equal to previous -> violation
	oracleHold(o, 1, 3, 400, 450) // 5th: lower than 5 -> violation
	oracleHold(o, 2, 9, 500, 550) // 6th
	assert.Equal(t, 2, o.Report().TokenOrderViolations)

	o2 := NewOracle()
	oracleHold(o2, 0, 0, 0, 50)
	oracleHold(o2, 1, 0, 100, 150)
	oracleHold(o2, 2, 4, 200, 250) // 0 -> 4 increases
	oracleHold(o2, 0, 0, 300, 350) // 4 -> 0 does not
	assert.Equal(t, 1, o2.Report().TokenOrderViolations)
}

func TestOraclePercentiles(t *testing.T) {
	o := NewOracle()
	// Successful latencies 1..100 ms, recorded in scrambled order.
	for i := range 100 {
		l := time.Duration((i*37)%100+1) * time.Millisecond
		o.Acquired(i%4, 0, oracleAt(o, i*10), oracleAt(o, i*10+5), l, 2)
	}
	o.Failed(9, oracleAt(o, 2000), 200*time.Millisecond, 3, "quorum not reached")
	r := o.Report()
	assert.Equal(t, 50*time.Millisecond, r.AcquireP50)
	assert.Equal(t, 99*time.Millisecond, r.AcquireP99)
	assert.Equal(t, 100*time.Millisecond, r.AcquireMax)
	assert.InDelta(t, 99.0, r.AcquireP99MS, 1e-9)
	// All 101 calls: rank ceil(50.5) = 51, ceil(99.99) = 100.
	assert.Equal(t, 51*time.Millisecond, r.CallP50)
	assert.Equal(t, 100*time.Millisecond, r.CallP99)
	assert.Equal(t, 200*time.Millisecond, r.CallMax)
	assert.Equal(t, 100, r.Acquisitions)
	assert.Equal(t, 1, r.FailedAcquires)
	assert.Equal(t, 203, r.Attempts)
	assert.Equal(t, map[string]int{"quorum not reached": 1}, r.FailureReasons)

	empty := NewOracle().Report()
	assert.Zero(t, empty.AcquireP50)
	assert.Zero(t, empty.CallMax)
}

func TestPercentileNearestRank(t *testing.T) {
	d := func(xs ...int) []time.Duration {
		out := make([]time.Duration, len(xs))
		for i, x := range xs {
			out[i] = time.Duration(x)
		}
		return out
	}
	s := d(40, 15, 50, 35, 20) // sorted: 15 20 35 40 50
	assert.Equal(t, time.Duration(15), Percentile(s, 5))
	assert.Equal(t, time.Duration(20), Percentile(s, 30))
	assert.Equal(t, time.Duration(20), Percentile(s, 40))
	assert.Equal(t, time.Duration(35), Percentile(s, 50))
	assert.Equal(t, time.Duration(50), Percentile(s, 100))
	assert.Equal(t, time.Duration(15), Percentile(s, 0))
	assert.Equal(t, time.Duration(50), Percentile(s, 150))
	assert.Equal(t, d(40, 15, 50, 35, 20), s, "input not modified")
	assert.Zero(t, Percentile(nil, 50))
	assert.Equal(t, time.Duration(7), Percentile(d(7), 99))
}

func TestOracleUnknownHoldEvents(t *testing.T) {
	o := NewOracle()
	o.Released(0, time.Now())
	o.Wrote(42, ResourcePlain, 1, true, time.Now())
	h := oracleHold(o, 0, 0, 0, 10)
	o.Released(h, oracleAt(o, 5))
	r := o.Report()
	assert.Equal(t, 2, r.UnknownHoldEvents)
	assert.Zero(t, r.Writes)
	assert.Equal(t, 1, r.Releases)
}

func TestOracleHistoryLanesFaultsNotes(t *testing.T) {
	o := NewOracle()
	o.Declare(2, 3)
	o.Declare(1, 1) // never lowers
	oracleHold(o, 4, 0, 0, 500)
	o.Failed(6, oracleAt(o, 50), time.Millisecond, 1, "taken")
	o.Fault(5, "killed", oracleAt(o, 100), time.Time{})
	o.Fault(1, "amnesia", oracleAt(o, 200), oracleAt(o, 200))
	o.Fault(1, "backwards", oracleAt(o, 300), oracleAt(o, 250))
	o.Note(oracleAt(o, 700), "client 4 paused")

	h := o.History()
	assert.Equal(t, []int{0, 1, 4, 6}, h.Clients)
	assert.Equal(t, []int{0, 1, 2, 5}, h.Nodes)
	assert.Equal(t, 700*time.Millisecond, h.End)
	assert.InDelta(t, 700.0, h.EndMS, 1e-9)
	require.Len(t, h.Faults, 3)
	assert.True(t, h.Faults[0].Open)
	assert.Equal(t, h.End, h.Faults[0].To, "open fault lasts until the end")
	assert.Equal(t, h.Faults[1].From, h.Faults[1].To)
	assert.Equal(t, h.Faults[2].From, h.Faults[2].To, "to before from is instantaneous")
	require.Len(t, h.Notes, 1)
	assert.Equal(t, "client 4 paused", h.Notes[0].Text)
	assert.Equal(t, o.Start(), h.Start)

	r := o.Report()
	assert.Equal(t, 3, r.Faults)
	assert.Equal(t, 1, r.Notes)
	assert.Equal(t, 700*time.Millisecond, r.Span)

	// History is a copy.
	h.Holds[0].Client = 99
	assert.Equal(t, 4, o.History().Holds[0].Client)
}

func TestOracleEmptyHistory(t *testing.T) {
	o := NewOracle()
	h := o.History()
	assert.Zero(t, h.End)
	assert.Empty(t, h.Clients)
	assert.Empty(t, h.Violations)
	r := o.Report()
	assert.Zero(t, r.Acquisitions)
	assert.NotNil(t, r.ViolationList)
}

func TestOracleReportJSON(t *testing.T) {
	o := NewOracle()
	a := oracleHold(o, 0, 1, 0, 100)
	oracleHold(o, 1, 2, 50, 150)
	o.Wrote(a, ResourcePlain, 1, true, oracleAt(o, 60))
	raw, err := json.Marshal(o.Report())
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(raw, &m))
	for _, k := range []string{"acquisitions", "failed_acquires", "violations", "violation_list",
		"stale_writes_plain", "stale_writes_fenced", "rejected_writes_fenced",
		"token_order_violations", "acquire_p50_ms", "acquire_p99_ms", "acquire_max_ms", "resources"} {
		assert.Contains(t, m, k)
	}
	assert.EqualValues(t, 1, m["violations"])
	list := m["violation_list"].([]any)
	require.Len(t, list, 1)
	assert.EqualValues(t, 50, list[0].(map[string]any)["from_ms"])

	raw, err = json.Marshal(o.History())
	require.NoError(t, err)
	var back History
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Len(t, back.Holds, 2)
	assert.Equal(t, 60*time.Millisecond, back.Writes[0].At)

	raw, err = json.Marshal(NewOracle().Report())
	require.NoError(t, err)
	assert.Contains(t, string(raw), `"violation_list":[]`)
}

func TestOracleConcurrentUse(t *testing.T) {
	const clients, rounds = 16, 200
	o := NewOracle()
	o.Declare(clients, 5)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-stop:
				return
			default:
				_ = o.Report()
				_ = o.History()
			}
		}
	}()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				now := time.Now()
				h := o.Acquired(c, uint64(i+1), now, now.Add(time.Millisecond), time.Microsecond, 1)
				o.Wrote(h, ResourcePlain, uint64(i+1), true, time.Now())
				o.Wrote(h, ResourceFenced, uint64(i+1), i%2 == 0, time.Now())
				o.Released(h, time.Now())
				o.Failed(c, time.Now(), time.Microsecond, 2, fmt.Sprintf("r%d", i%3))
				if i%50 == 0 {
					o.Note(time.Now(), fmt.Sprintf("client %d round %d", c, i))
					o.Fault(c%5, "paused", time.Now(), time.Now())
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	r := o.Report()
	assert.Equal(t, clients*rounds, r.Acquisitions)
	assert.Equal(t, clients*rounds, r.FailedAcquires)
	assert.Equal(t, clients*rounds, r.Releases)
	assert.Equal(t, 2*clients*rounds, r.Writes)
	assert.Equal(t, clients*rounds/2, r.RejectedWritesFenced)
	assert.Equal(t, clients*rounds*3, r.Attempts)
	assert.Equal(t, clients*4, r.Notes)
	assert.Zero(t, r.UnknownHoldEvents)
	h := o.History()
	seen := map[HoldID]bool{}
	for i, x := range h.Holds {
		assert.Equal(t, HoldID(i+1), x.ID)
		seen[x.ID] = true
	}
	assert.Len(t, seen, clients*rounds)
}

// With fencing on, a holder whose token equals the previous one's is out of
// order even when both are 0 (a counter that never moves).
func TestOracle_ExpectTokensCountsZeroPairs(t *testing.T) {
	for _, expect := range []bool{false, true} {
		o := NewOracle()
		if expect {
			o.ExpectTokens()
		}
		now := time.Now()
		o.Acquired(0, 0, now, now.Add(time.Millisecond), 0, 1)
		o.Acquired(1, 0, now.Add(2*time.Millisecond), now.Add(3*time.Millisecond), 0, 1)
		want := 0
		if expect {
			want = 1
		}
		assert.Equal(t, want, o.Report().TokenOrderViolations, "ExpectTokens %v", expect)
	}
}

// Extended moves the believed end of a hold (later or earlier) and counts.
func TestOracle_ExtendedMovesTheBelievedEnd(t *testing.T) {
	o := NewOracle()
	now := o.Start()
	a := o.Acquired(0, 1, now, now.Add(10*time.Millisecond), 0, 1)
	b := o.Acquired(1, 2, now.Add(15*time.Millisecond), now.Add(20*time.Millisecond), 0, 1)
	assert.Zero(t, o.Report().Violations)
	o.Extended(a, now.Add(30*time.Millisecond))
	r := o.Report()
	assert.Equal(t, 1, r.Violations)
	assert.Equal(t, 1, r.ExtendedHolds)
	o.Extended(a, now.Add(12*time.Millisecond))
	assert.Zero(t, o.Report().Violations)
	o.Extended(HoldID(99), now)
	assert.Equal(t, 1, o.Report().UnknownHoldEvents)
	_ = b
}

// Shared holds (read locks) may overlap each other but not an exclusive
// one; a shared hold's writes are reads, stale only after a later exclusive
// hold's; a reader's token is the last writer's, and a writer's is above
// the previous hold's.
func TestOracleSharedHolds(t *testing.T) {
	o := NewOracle()
	shared := func(client int, token uint64, a, v int) HoldID {
		return o.AcquiredShared(client, token, oracleAt(o, a), oracleAt(o, v), time.Millisecond, 1)
	}
	w1 := oracleHold(o, 0, 5, 0, 100)
	r1 := shared(1, 5, 100, 200)
	r2 := shared(2, 5, 150, 250) // overlaps r1: fine
	o.Wrote(w1, ResourcePlain, 5, true, oracleAt(o, 50))
	o.Wrote(r2, ResourcePlain, 5, true, oracleAt(o, 160))
	o.Wrote(r1, ResourcePlain, 5, true, oracleAt(o, 170)) // after a later reader's read: not stale
	r := o.Report()
	assert.Zero(t, r.Violations, "readers overlap each other")
	assert.Zero(t, r.StaleWritesPlain)
	assert.Zero(t, r.TokenOrderViolations)
	assert.True(t, o.History().Holds[r1-1].Shared)

	w2 := oracleHold(o, 3, 6, 220, 300) // overlaps r2 (to 250): a violation
	o.Wrote(w2, ResourcePlain, 6, true, oracleAt(o, 230))
	o.Wrote(r2, ResourcePlain, 5, true, oracleAt(o, 240)) // a read after a later writer's write: stale
	r = o.Report()
	assert.Equal(t, 1, r.Violations)
	assert.Equal(t, 1, r.StaleWritesPlain)
	// A paused writer's late write, after later readers' reads: stale, and
	// its acted interval now overlaps r1, r2 and w2.
	o.Wrote(w1, ResourcePlain, 5, true, oracleAt(o, 245))
	r = o.Report()
	assert.Equal(t, 4, r.Violations)
	assert.Equal(t, 2, r.StaleWritesPlain)
	assert.Zero(t, r.TokenOrderViolations)

	shared(1, 5, 310, 400)        // below the last writer's 6
	oracleHold(o, 0, 7, 410, 500) // above the reader's 5
	shared(2, 7, 510, 600)
	oracleHold(o, 3, 7, 610, 700) // not above the reader's 7
	assert.Equal(t, 2, o.Report().TokenOrderViolations)
}
