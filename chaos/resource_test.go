package chaos

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPlainResourceAcceptsEverything(t *testing.T) {
	r := NewPlainResource()
	v, tok := r.Last()
	assert.Empty(t, v)
	assert.Zero(t, tok)
	assert.Zero(t, r.Writes())

	assert.True(t, r.Write(5, "a"))
	assert.True(t, r.Write(3, "b")) // lower token: still accepted
	assert.True(t, r.Write(0, "c"))
	v, tok = r.Last()
	assert.Equal(t, "c", v)
	assert.Zero(t, tok)
	assert.Equal(t, 3, r.Writes())

	var zero PlainResource
	assert.True(t, zero.Write(1, "z"))
	assert.Equal(t, 1, zero.Writes())
}

func TestFencedResourceRejectsLowerTokens(t *testing.T) {
	r := NewFencedResource()
	assert.True(t, r.Write(5, "a"))
	assert.False(t, r.Write(3, "stale"))
	assert.True(t, r.Write(5, "a again"), "equal token: same holder writing twice")
	assert.True(t, r.Write(7, "b"))
	assert.False(t, r.Write(6, "stale"))
	assert.False(t, r.Write(0, "unfenced"))

	v, tok := r.Last()
	assert.Equal(t, "b", v)
	assert.Equal(t, uint64(7), tok)
	assert.Equal(t, 3, r.Writes())
	assert.Equal(t, 3, r.Rejected())
}

func TestFencedResourceTokenZeroAcceptsAll(t *testing.T) {
	var r FencedResource // zero value usable
	for i := range 3 {
		assert.True(t, r.Write(0, fmt.Sprint(i)))
	}
	v, _ := r.Last()
	assert.Equal(t, "2", v)
	assert.Equal(t, 3, r.Writes())
	assert.Zero(t, r.Rejected())
}

func TestResourceConcurrentWrites(t *testing.T) {
	const writers, each = 8, 500
	plain, fenced := NewPlainResource(), NewFencedResource()
	var resources []Resource = []Resource{plain, fenced}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tok := uint64(i*writers + w + 1)
				for _, r := range resources {
					r.Write(tok, fmt.Sprintf("w%d-%d", w, i))
				}
				_ = fenced.Rejected()
				_, _ = plain.Last()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, writers*each, plain.Writes())
	assert.Equal(t, writers*each, fenced.Writes()+fenced.Rejected())
	_, tok := fenced.Last()
	assert.Equal(t, uint64(writers*each), tok, "the highest token always wins")
}

// The fenced resource is fencing.Guard: it accepts an equal token (the same
// holder writing again), so two holders given one token both pass; the
// oracle then counts the older holder's accepted write as stale.
func TestFencedResource_EqualTokenFromAnotherHolderIsCountedStale(t *testing.T) {
	r := NewFencedResource()
	o := NewOracle()
	now := o.Start()
	a := o.Acquired(0, 7, now, now.Add(time.Second), 0, 1)
	b := o.Acquired(1, 7, now.Add(time.Millisecond), now.Add(time.Second), 0, 1)
	o.Wrote(b, ResourceFenced, 7, r.Write(7, "b"), now.Add(2*time.Millisecond))
	o.Wrote(a, ResourceFenced, 7, r.Write(7, "a"), now.Add(3*time.Millisecond))
	rep := o.Report()
	assert.Equal(t, 1, rep.StaleWritesFenced)
	assert.Equal(t, 1, rep.TokenOrderViolations)
}
