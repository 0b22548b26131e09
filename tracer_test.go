package redlock_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// callRecorder is a redlock.Tracer that numbers each call and records, as
// lines, every start, end and event with the number of the call whose
// context the event carried (0: none).
type callRecorder struct {
	mu     sync.Mutex
	next   int
	lines  []string
	tokens map[uint64]string // fencing token → T1, T2... in order of appearance
}

type callNo struct{}

func (r *callRecorder) StartCall(ctx context.Context, op redlock.Op, key string) (context.Context, func(*redlock.Lock, error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	n, parent := r.next, callOf(ctx)
	r.lines = append(r.lines, fmt.Sprintf("start %d %s %s in %d", n, op, key, parent))
	ended := false
	return context.WithValue(ctx, callNo{}, n), func(l *redlock.Lock, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if ended {
			r.lines = append(r.lines, fmt.Sprintf("end %d again", n))
		}
		ended = true
		// Tokens start from a node's clock: record which holder's it is.
		tok := "none"
		if l != nil {
			if _, seen := r.tokens[l.Token()]; !seen {
				r.tokens[l.Token()] = fmt.Sprintf("T%d", len(r.tokens)+1)
			}
			tok = r.tokens[l.Token()]
		}
		r.lines = append(r.lines, fmt.Sprintf("end %d token=%s err=%v", n, tok, err != nil))
	}
}

func (r *callRecorder) ObserveContext(ctx context.Context, e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("event %s ok=%v in %d", e.Op, e.OK, callOf(ctx)))
}

func (r *callRecorder) Observe(e redlock.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, "Observe called on a Tracer")
}

func callOf(ctx context.Context) int {
	n, _ := ctx.Value(callNo{}).(int)
	return n
}

func (r *callRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lines
	r.lines = nil
	return out
}

func TestTracer_EachCallStartsAndEndsOnceAndItsEventsCarryItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := &callRecorder{tokens: map[uint64]string{}}
		c := newCluster(t, 3, redlock.WithObserver(rec))
		ctx := context.Background()

		l := c.acquire(t, ctx, "job", time.Second)
		l2, err := l.Extend(ctx, time.Second)
		require.NoError(t, err)
		require.NoError(t, l2.Release(ctx))
		_, err = l2.Extend(ctx, 0) // rejected before any round trip: no Event, but the call ends
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.Equal(t, []string{
			"start 1 acquire job in 0", "event acquire ok=true in 1", "end 1 token=T1 err=false",
			"start 2 extend job in 0", "event extend ok=true in 2", "end 2 token=T1 err=false",
			"start 3 release job in 0", "event release ok=true in 3", "end 3 token=none err=false",
			"start 4 extend job in 0", "end 4 token=none err=true",
		}, rec.take())

		// A failed acquisition: every attempt's event carries the call's context.
		c.holdElsewhere(t, "held", time.Minute, 0, 1)
		_, err = c.rl.Acquire(ctx, "held", time.Second, redlock.WithRetry(redlock.LinearRetry(10*time.Millisecond, 0, 2)))
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.Equal(t, []string{
			"start 5 acquire held in 0", "event acquire ok=false in 5", "event acquire ok=false in 5", "end 5 token=none err=true",
		}, rec.take())

		// Do: its acquisition, extensions and release are children of the
		// Do call; fn's context carries it, and a reentrant Acquire inside
		// starts no call of its own.
		err = c.rl.Do(ctx, "job", time.Second, func(ctx context.Context, _ *redlock.Lease) error {
			assert.Equal(t, 6, callOf(ctx), "fn's context derives from the Do call's")
			nested := c.acquire(t, ctx, "job", time.Second)
			require.NoError(t, nested.Release(ctx))
			time.Sleep(400 * time.Millisecond) // one extension at ttl/3
			return nil
		})
		require.NoError(t, err)
		assert.Equal(t, []string{
			"start 6 do job in 0",
			"start 7 acquire job in 6", "event acquire ok=true in 7", "end 7 token=T2 err=false",
			"start 8 extend job in 6", "event extend ok=true in 8", "end 8 token=T2 err=false",
			"start 9 release job in 6", "event release ok=true in 9", "end 9 token=none err=false",
			"end 6 token=none err=false",
		}, rec.take())
	})
}
