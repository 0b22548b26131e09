package redlock

import (
	"slices"
	"testing"
	"time"

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
			q := newNodeQueue(size)
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
