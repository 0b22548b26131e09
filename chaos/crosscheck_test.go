package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// fencedHistory records two holds (a acquired before b) and the given fenced
// writes: each {hold, token, accepted, start ms, end ms}, and the oracle's
// report on them.
func fencedHistory(t *testing.T, writes [][5]int) (oracle.History, oracle.Report) {
	t.Helper()
	o := oracle.NewOracle()
	now := o.Start()
	ms := func(n int) time.Time { return now.Add(time.Duration(n) * time.Millisecond) }
	ids := []oracle.HoldID{
		o.Acquired(0, 1, ms(0), ms(100), 0, 1),
		o.Acquired(1, 2, ms(10), ms(100), 0, 1),
	}
	for _, w := range writes {
		o.WroteSpan(ids[w[0]], oracle.ResourceFenced, uint64(w[1]), w[2] == 1, ms(w[3]), ms(w[4]))
	}
	return o.History(), o.Report()
}

func TestCrossCheck_AgreesWithTheOracle(t *testing.T) {
	for name, tc := range map[string]struct {
		writes [][5]int
		stale  int
		note   bool
	}{
		"in order":            {writes: [][5]int{{0, 1, 1, 1, 2}, {1, 2, 1, 11, 12}, {0, 1, 0, 13, 14}}},
		"stale, equal tokens": {writes: [][5]int{{1, 1, 1, 11, 12}, {0, 1, 1, 13, 14}}, stale: 1},
		// B's write is in flight when A's starts: either may have taken
		// effect first, so neither the oracle nor porcupine calls A stale.
		"raced": {writes: [][5]int{{1, 2, 1, 11, 15}, {0, 1, 1, 12, 13}}},
	} {
		t.Run(name, func(t *testing.T) {
			h, rep := fencedHistory(t, tc.writes)
			require.Equal(t, tc.stale, rep.StaleWritesFenced)
			note, err := crossCheck(h, rep.StaleWritesFenced)
			require.NoError(t, err)
			assert.Equal(t, tc.note, note != "", note)
		})
	}
}

// When the guard refuses a write it should have taken, or the oracle misses a
// stale write, the two disagree and the cross-check fails.
func TestCrossCheck_DisagreementFails(t *testing.T) {
	h, rep := fencedHistory(t, [][5]int{{0, 1, 1, 1, 2}, {1, 2, 0, 11, 12}}) // token 2 refused after 1
	_, err := crossCheck(h, rep.StaleWritesFenced)
	assert.ErrorContains(t, err, "porcupine finds no legal order")

	h, _ = fencedHistory(t, [][5]int{{1, 2, 1, 11, 12}, {0, 2, 1, 13, 14}}) // stale, but told 0
	_, err = crossCheck(h, 0)
	assert.ErrorContains(t, err, "porcupine finds no legal order")
}
