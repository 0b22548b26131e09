package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// The plain store takes every write; the fenced one is fencing.Register: it
// refuses a token below the highest it accepted, and takes an equal one (the
// same holder writing again) and, before any fenced write, a 0.
func TestResources_PlainTakesAllFencedIsTheRegister(t *testing.T) {
	r := newResources()
	for _, tok := range []uint64{5, 3, 0} {
		assert.True(t, r.writePlain(tok), "plain, token %d", tok)
	}
	assert.True(t, newResources().writeFenced(0), "fencing off: token 0 passes")
	for _, w := range []struct {
		token uint64
		ok    bool
	}{{5, true}, {3, false}, {5, true}, {7, true}, {6, false}, {0, false}} {
		assert.Equal(t, w.ok, r.writeFenced(w.token), "fenced, token %d", w.token)
	}
	assert.Equal(t, uint64(7), r.fenced.(*registerStore).reg.Highest())
}

// Since the fenced store accepts an equal token, two holders given one token
// both pass; the oracle then counts the older holder's accepted write as
// stale.
func TestResources_EqualTokenFromAnotherHolderIsCountedStale(t *testing.T) {
	r := newResources()
	o := oracle.NewOracle()
	now := o.Start()
	a := o.Acquired(0, 7, now, now.Add(time.Second), 0, 1)
	b := o.Acquired(1, 7, now.Add(time.Millisecond), now.Add(time.Second), 0, 1)
	o.Wrote(b, oracle.ResourceFenced, 7, r.writeFenced(7), now.Add(2*time.Millisecond))
	o.Wrote(a, oracle.ResourceFenced, 7, r.writeFenced(7), now.Add(3*time.Millisecond))
	rep := o.Report()
	assert.Equal(t, 1, rep.StaleWritesFenced)
	assert.Equal(t, 1, rep.TokenOrderViolations)
}
