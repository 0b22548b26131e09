package nodecall

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// TestNodeQueue_SameOrderOnEveryNode: the calls of many votes reach three
// nodes' queues in a different order on each node, and some of them leave
// the queue (their vote was decided, or their budget ran out) while they
// wait. Every queue admits the ones still waiting in the same order: their
// turns' (oldest start first, then sequence number), whatever the order they
// came in; a call that leaves just after it was given a slot passes the slot
// on; and each queue ends with every slot free.
func TestNodeQueue_SameOrderOnEveryNode(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		size := rapid.IntRange(1, 3).Draw(t, "size")
		n := rapid.IntRange(1, 25).Draw(t, "calls")
		base := time.Now()
		calls := make([]*nodeCall, n)
		for i := range calls {
			// Few distinct starts: many ties, broken by the sequence number.
			at := base.Add(time.Duration(rapid.IntRange(0, 3).Draw(t, "start")) * time.Millisecond)
			calls[i] = &nodeCall{turn: nextTurn(at)}
		}
		want := slices.Clone(calls)
		slices.SortFunc(want, func(a, b *nodeCall) int {
			if a.turn.before(b.turn) {
				return -1
			}
			return 1
		})

		var orders [3][]*nodeCall
		for node := range orders {
			q := NewQueue(size, nil, errors.New("closed"))
			for range size {
				if w := q.take(nil); w != nil {
					t.Fatalf("node %d: a free slot made a call wait", node)
				}
			}
			arrival := rapid.Permutation(calls).Draw(t, "arrival")
			ws := map[*nodeCall]*waiter{}  // waiting
			adm := map[*nodeCall]*waiter{} // admitted
			for _, nc := range arrival {
				w := q.take(nc)
				if w == nil {
					t.Fatalf("node %d: admitted at once with every slot taken", node)
				}
				ws[nc] = w
			}
			// Some leave while waiting, on this node only.
			left := map[*nodeCall]bool{}
			for _, nc := range arrival {
				if rapid.IntRange(0, 4).Draw(t, "leaves") == 0 {
					q.leave(ws[nc])
					left[nc] = true
				}
			}
			// Free the slots one at a time: each goes to one waiter. Now
			// and then the one admitted gives up anyway, as a call whose
			// deadline fired with its turn does, and passes its slot on.
			for holders := size; holders > 0; holders-- {
				q.free()
				var got []*nodeCall
				for nc, w := range ws {
					select {
					case <-w.ready:
						got = append(got, nc)
						adm[nc] = w
						delete(ws, nc)
					default:
					}
				}
				if len(got) > 1 {
					t.Fatalf("node %d: one free admitted %d calls", node, len(got))
				}
				for len(got) == 1 {
					nc := got[0]
					if left[nc] {
						t.Fatalf("node %d: admitted a call that had left", node)
					}
					if rapid.IntRange(0, 5).Draw(t, "gives up when admitted") != 0 {
						orders[node] = append(orders[node], nc)
						holders++ // it frees its slot later
						break
					}
					left[nc] = true
					q.leave(adm[nc]) // given its slot: leave frees it
					got = got[:0]
					for nc, w := range ws {
						select {
						case <-w.ready:
							got = append(got, nc)
							adm[nc] = w
							delete(ws, nc)
						default:
						}
					}
				}
			}
			var wantNode []*nodeCall
			for _, nc := range want {
				if !left[nc] {
					wantNode = append(wantNode, nc)
				}
			}
			if !slices.Equal(orders[node], wantNode) {
				t.Fatalf("node %d admitted %v, want %v", node, turnsOf(orders[node]), turnsOf(wantNode))
			}
			if q.busy != 0 || len(q.waiting) != 0 {
				t.Fatalf("node %d ends with %d slots taken and %d waiting", node, q.busy, len(q.waiting))
			}
		}
	})
}

func turnsOf(ncs []*nodeCall) []uint64 {
	seqs := make([]uint64, len(ncs))
	for i, nc := range ncs {
		seqs[i] = nc.turn.seq
	}
	return seqs
}

// TestNodeQueue_VoteContextClock: a vote's node context ends at the per-node
// timeout from the vote's start, its expired channel a per-node timeout
// after the vote's queue deadline; both end at once with the parent (or at
// the parent's earlier deadline) and when cancelled, and carry the parent's
// values.
func TestNodeQueue_VoteContextClock(t *testing.T) {
	const timeout = 10 * time.Millisecond
	type key struct{}
	isClosed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	e := &Engine{Queued: true}

	t.Run("deadline then end", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			parent := context.WithValue(context.Background(), key{}, "v")
			nctx, expired, cancel := e.NodeContext(e.WithQueueBy(parent, start.Add(50*time.Millisecond), nil), timeout)
			defer cancel()
			dl, ok := nctx.Deadline()
			require.True(t, ok)
			require.Equal(t, start.Add(timeout), dl)
			require.Equal(t, "v", nctx.Value(key{}))

			time.Sleep(timeout - time.Nanosecond)
			synctest.Wait()
			require.NoError(t, nctx.Err())
			require.False(t, isClosed(nctx.Done()))
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			require.ErrorIs(t, nctx.Err(), context.DeadlineExceeded)
			require.True(t, isClosed(nctx.Done()))
			require.False(t, isClosed(expired), "expired before the queue deadline + timeout")

			time.Sleep(50*time.Millisecond - time.Nanosecond) // start + 60 ms − 1 ns
			synctest.Wait()
			require.False(t, isClosed(expired))
			time.Sleep(time.Nanosecond)
			synctest.Wait()
			require.True(t, isClosed(expired))
		})
	})
	t.Run("parent cancelled", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			parent, cancelParent := context.WithCancel(context.Background())
			nctx, expired, cancel := e.NodeContext(parent, timeout)
			defer cancel()
			cancelParent()
			synctest.Wait()
			require.ErrorIs(t, nctx.Err(), context.Canceled)
			require.True(t, isClosed(expired))
		})
	})
	t.Run("parent already ended", func(t *testing.T) {
		parent, cancelParent := context.WithCancel(context.Background())
		cancelParent()
		nctx, expired, cancel := e.NodeContext(parent, timeout)
		defer cancel()
		require.ErrorIs(t, nctx.Err(), context.Canceled, "at once, before any command is sent")
		require.True(t, isClosed(expired))
	})
	t.Run("parent deadline sooner", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			start := time.Now()
			parent, cancelParent := context.WithTimeout(context.Background(), timeout/2)
			defer cancelParent()
			nctx, expired, cancel := e.NodeContext(parent, timeout)
			defer cancel()
			dl, _ := nctx.Deadline()
			require.Equal(t, start.Add(timeout/2), dl)
			time.Sleep(timeout / 2)
			synctest.Wait()
			require.ErrorIs(t, nctx.Err(), context.DeadlineExceeded)
			require.True(t, isClosed(expired))
		})
	})
	t.Run("cancel", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			nctx, expired, cancel := e.NodeContext(context.Background(), timeout)
			cancel()
			require.ErrorIs(t, nctx.Err(), context.Canceled)
			require.True(t, isClosed(expired))
			time.Sleep(3 * timeout) // the stopped clock changes nothing
			require.ErrorIs(t, nctx.Err(), context.Canceled)
		})
	})
}

// TestNodeQueue_CleanupContext: a clean-up called from a release's vote (a
// parent that never ends) runs on the vote's deadline and values; one called
// with a context that can end is not ended by it.
func TestNodeQueue_CleanupContext(t *testing.T) {
	const timeout = 10 * time.Millisecond
	type key struct{}
	e := &Engine{Queued: true}
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		parent, cancelParent := context.WithCancel(context.WithValue(context.Background(), key{}, "v"))
		vctx, _, cancelVote := e.NodeContext(context.WithoutCancel(parent), timeout)
		defer cancelVote()
		cctx, cancel := e.CleanupContext(vctx, start.Add(time.Second), timeout)
		defer cancel()
		dl, _ := cctx.Deadline()
		require.Equal(t, start.Add(timeout), dl)
		require.Equal(t, "v", cctx.Value(key{}))

		// A vote that its caller can cancel: its clean-up outlives that.
		vctx2, _, cancelVote2 := e.NodeContext(parent, timeout)
		defer cancelVote2()
		cctx2, cancel2 := e.CleanupContext(vctx2, start.Add(time.Second), timeout)
		defer cancel2()
		cancelParent()
		synctest.Wait()
		require.ErrorIs(t, vctx2.Err(), context.Canceled)
		require.NoError(t, cctx2.Err(), "the clean-up ended with its caller")
		require.Equal(t, "v", cctx2.Value(key{}))
		time.Sleep(timeout)
		synctest.Wait()
		require.ErrorIs(t, cctx2.Err(), context.DeadlineExceeded)
	})
}

// TestNodeQueue_FreeSlotAllocations: the allocations of a vote's context and
// of a command that finds its node's slot free, with a release's clean-up
// on top. With two nested context.WithDeadline per vote and a context
// wrapper per command, the C1 profile counted about 13 per vote context, 2
// per command, and a vote context more per clean-up.
func TestNodeQueue_FreeSlotAllocations(t *testing.T) {
	e := &Engine{Queued: true}
	q := NewQueue(2, nil, errors.New("closed"))
	command := func(ctx context.Context) {
		a, err := q.admit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q.exit(a)
	}
	vote := testing.AllocsPerRun(100, func() {
		nctx, _, cancel := e.NodeContext(context.Background(), time.Second)
		command(nctx)
		cancel()
	})
	release := testing.AllocsPerRun(100, func() {
		nctx, _, cancel := e.NodeContext(context.Background(), time.Second)
		cctx, cancelCleanup := e.CleanupContext(nctx, time.Now().Add(time.Second), time.Second)
		command(cctx)
		cancelCleanup()
		cancel()
	})
	t.Logf("allocations: vote and command %v, with a clean-up %v", vote, release)
	if vote > 6 || release > 6 {
		t.Errorf("allocations: vote and command %v, with a clean-up %v; want at most 6", vote, release)
	}
	if q.busy != 0 {
		t.Errorf("%d slots left taken", q.busy)
	}
}
