package fencing_test

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/fencing"
)

func TestRegisterZeroValueAcceptsAnything(t *testing.T) {
	var g fencing.Register
	assert.Zero(t, g.Highest())
	require.NoError(t, g.Check(0), "token 0 (fencing off) on a fresh register")
	require.NoError(t, g.Check(0), "and again: equal tokens are accepted")
	assert.Zero(t, g.Highest())

	var g2 fencing.Register
	require.NoError(t, g2.Check(42))
	assert.Equal(t, uint64(42), g2.Highest())
}

func TestRegisterRejectsStaleAcceptsEqualAndHigher(t *testing.T) {
	var g fencing.Register
	require.NoError(t, g.Check(33))
	require.NoError(t, g.Check(34))
	require.NoError(t, g.Check(34), "the same holder writes twice")

	err := g.Check(33)
	require.ErrorIs(t, err, fencing.ErrStale)
	var se *fencing.StaleError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, uint64(33), se.Token)
	assert.Equal(t, uint64(34), se.Highest)
	assert.EqualError(t, err, "fencing: stale token 33: the resource has already accepted token 34")
	assert.Equal(t, uint64(34), g.Highest(), "a refused token is not recorded")

	require.NoError(t, g.Check(35))
	assert.Equal(t, uint64(35), g.Highest())
	require.ErrorIs(t, g.Check(0), fencing.ErrStale, "token 0 after a real token")
}

func TestRegisterDo(t *testing.T) {
	var g fencing.Register
	var body string
	write := func(s string) func() error { return func() error { body = s; return nil } }

	require.NoError(t, g.Do(7, write("seven")))
	assert.Equal(t, "seven", body)

	ran := false
	err := g.Do(6, func() error { ran = true; return nil })
	require.ErrorIs(t, err, fencing.ErrStale)
	assert.False(t, ran, "fn must not run for a stale token")
	assert.Equal(t, "seven", body)

	require.NoError(t, g.Do(7, write("seven again")), "equal token")
	assert.Equal(t, "seven again", body)

	// fn's error comes back as is, and the token stays recorded: a holder
	// with token 9 exists, so 8 is stale even though 9's write failed.
	boom := errors.New("disk full")
	require.ErrorIs(t, g.Do(9, func() error { return boom }), boom)
	assert.Equal(t, uint64(9), g.Highest())
	require.ErrorIs(t, g.Do(8, write("eight")), fencing.ErrStale)
	assert.Equal(t, "seven again", body)
}

// Many writers race with shuffled tokens; whatever order they run in, the
// resource ends with the highest token's value, and the writes it accepted
// came in non-decreasing token order.
func TestRegisterConcurrentWritersEndWithHighest(t *testing.T) {
	const writers = 200
	var (
		g        fencing.Register
		body     uint64 // written only under the register, through Do
		accepted []uint64
		stale    int
		mu       sync.Mutex // guards stale
		wg       sync.WaitGroup
	)
	tokens := rand.Perm(writers)
	start := make(chan struct{})
	for _, tok := range tokens {
		tok := uint64(tok + 1)
		wg.Go(func() {
			<-start
			err := g.Do(tok, func() error {
				body = tok
				accepted = append(accepted, tok)
				return nil
			})
			if err != nil {
				var se *fencing.StaleError
				if assert.ErrorAs(t, err, &se) { // assert, not require: not the test's goroutine
					assert.Greater(t, se.Highest, tok)
				}
				mu.Lock()
				stale++
				mu.Unlock()
			}
			_ = g.Check(tok) // readers and writers mixed: Check must be race-free too
		})
	}
	close(start)
	wg.Wait()

	assert.Equal(t, uint64(writers), g.Highest())
	assert.Equal(t, uint64(writers), body)
	assert.IsNonDecreasing(t, accepted)
	assert.Equal(t, writers, len(accepted)+stale)
}
