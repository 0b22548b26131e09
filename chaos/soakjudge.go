package chaos

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// soakWindow is how long one of a key's oracles takes new holds before the
// next one does. A soak runs for minutes with thousands of holds a second:
// one oracle for the whole run would keep every hold and write in memory,
// so each key's history is cut into windows, judged and dropped once the
// last hold that began in them has ended.
const soakWindow = 5 * time.Second

// soakGrace is how long a window stays open after its last hold ended, for
// holds whose Acquire answered before that end but that were recorded
// after it (a loaded machine may take that long to schedule the holder).
const soakGrace = 2 * time.Second

// window is one oracle of a key: the holds begun while it was the key's
// current window (native), plus shadows of later holds begun while one of
// its own was still open, so that a straggler is judged against its
// successors.
type window struct {
	o       *oracle.Oracle
	native  map[oracle.HoldID]bool
	open    int       // native holds not yet done
	lastEnd time.Time // when the last native hold was done
	began   time.Time
}

// keyJudge judges one lock key over a whole soak with the chaos oracle, a
// window at a time (soakWindow), and keeps the key's fenced register.
type keyJudge struct {
	key   string
	start time.Time // the soak's start, for Violation.At
	fence FencedStore

	mu      sync.Mutex
	windows []*window // oldest first; the last one takes new holds
}

func newKeyJudge(key string, start time.Time) *keyJudge {
	return &keyJudge{key: key, start: start, fence: NewRegisterStore()}
}

// soakHold is one hold as the judge records it: in its own window and as a
// shadow in every older window still open.
type soakHold struct {
	j    *keyJudge
	refs []holdRef
	done bool
}

type holdRef struct {
	w  *window
	id oracle.HoldID
}

// acquired records a hold of client with token, believed valid from
// acquired to validUntil.
func (j *keyJudge) acquired(client int, token uint64, acquired, validUntil time.Time, latency time.Duration) *soakHold {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := time.Now()
	cur := j.current(now)
	h := &soakHold{j: j}
	id := cur.o.Acquired(client, token, acquired, validUntil, latency, 1)
	cur.native[id] = true
	cur.open++
	h.refs = append(h.refs, holdRef{cur, id})
	for _, w := range j.windows[:len(j.windows)-1] {
		h.refs = append(h.refs, holdRef{w, w.o.Acquired(client, token, acquired, validUntil, latency, 1)})
	}
	return h
}

// current returns the window that takes new holds, starting a new one
// when it is older than soakWindow.
func (j *keyJudge) current(now time.Time) *window {
	if n := len(j.windows); n > 0 && now.Sub(j.windows[n-1].began) < soakWindow {
		return j.windows[n-1]
	}
	w := &window{o: oracle.NewOracle(), native: map[oracle.HoldID]bool{}, began: now}
	w.o.ExpectTokens()
	j.windows = append(j.windows, w)
	return w
}

// write writes token to the key's fenced register on behalf of h and
// records it (the plain resource, which takes everything, too).
func (h *soakHold) write(token uint64) {
	at := time.Now()
	ok, _ := h.j.fence.Write(context.Background(), token) // a fencing.Register: never fails
	end := time.Now()
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	for _, r := range h.refs {
		r.w.o.Wrote(r.id, oracle.ResourcePlain, token, true, at)
		r.w.o.WroteSpan(r.id, oracle.ResourceFenced, token, ok, at, end)
	}
}

// extended records that the holder now believes the lock valid until v.
func (h *soakHold) extended(v time.Time) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	for _, r := range h.refs {
		r.w.o.Extended(r.id, v)
	}
}

// released records that the holder stopped (released or gave up) at, and
// that it writes no more: the hold is done.
func (h *soakHold) released(at time.Time) {
	h.j.mu.Lock()
	defer h.j.mu.Unlock()
	if h.done {
		return
	}
	h.done = true
	for _, r := range h.refs {
		r.w.o.Released(r.id, at)
	}
	own := h.refs[0].w
	own.open--
	own.lastEnd = time.Now()
}

// judge judges and drops the windows that are done: not the current one,
// no native hold open, and soakGrace past the last one's end (every window
// when final). It returns the findings of the windows judged now, apart
// for those at an instant unsafe says is in an unsafe fault's window.
func (j *keyJudge) judge(now time.Time, final bool, unsafe func(time.Duration) bool) (safe, uns SoakCounts) {
	j.mu.Lock()
	var ready []*window
	keep := j.windows[:0]
	for i, w := range j.windows {
		last := i == len(j.windows)-1
		if final || (!last && w.open == 0 && now.Sub(w.lastEnd) >= soakGrace) {
			ready = append(ready, w)
			continue
		}
		keep = append(keep, w)
	}
	clear(j.windows[len(keep):])
	j.windows = keep
	j.mu.Unlock()

	for _, w := range ready {
		j.judgeWindow(w, unsafe, &safe, &uns)
	}
	return safe, uns
}

// judgeWindow adds what the oracle found in w that concerns one of w's
// own holds to safe, or to uns when unsafe says it happened in an unsafe
// fault's window: a pair of shadows, or a shadow's write, is the business
// of the window that owns them.
func (j *keyJudge) judgeWindow(w *window, unsafe func(time.Duration) bool, safe, uns *SoakCounts) {
	h := w.o.History()
	since := func(d time.Duration) time.Duration { return h.Start.Add(d).Sub(j.start) }
	pick := func(d time.Duration) *SoakCounts {
		if unsafe(since(d)) {
			return uns
		}
		return safe
	}
	defect := func(c *SoakCounts, d time.Duration, what string) {
		if len(c.First) < 20 {
			c.First = append(c.First, SoakViolation{Key: j.key, At: since(d), What: what})
		}
	}
	for _, x := range h.Holds {
		if w.native[x.ID] {
			safe.Holds++
		}
	}
	for _, v := range h.Violations {
		if !w.native[v.HoldA] && !w.native[v.HoldB] {
			continue
		}
		c := pick(v.From)
		if v.Believed {
			c.Overlaps++
			defect(c, v.From, fmt.Sprintf("believed-held intervals overlap: client %d and client %d", v.ClientA, v.ClientB))
		} else {
			c.LateWriteOverlaps++
		}
	}
	for _, x := range h.Writes {
		if !w.native[x.Hold] {
			continue
		}
		switch x.Resource {
		case oracle.ResourceFenced:
			safe.FencedWrites++
			if !x.Accepted {
				safe.FencedRefused++
			}
			if x.Stale {
				c := pick(x.At)
				c.StaleAccepted++
				defect(c, x.At, fmt.Sprintf("the fenced register accepted a stale write of token %d (client %d)", x.Token, x.Client))
			}
		case oracle.ResourcePlain:
			if x.Stale {
				pick(x.At).StalePlain++
			}
		}
	}
	holds := slices.Clone(h.Holds)
	slices.SortStableFunc(holds, func(a, b oracle.HoldRecord) int {
		return cmp.Or(cmp.Compare(a.Acquired, b.Acquired), cmp.Compare(a.ID, b.ID))
	})
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if !w.native[a.ID] && !w.native[b.ID] {
			continue
		}
		if b.Token <= a.Token {
			c := pick(b.Acquired)
			c.TokensOutOfOrder++
			defect(c, b.Acquired, fmt.Sprintf("token %d (client %d) after token %d (client %d)", b.Token, b.Client, a.Token, a.Client))
		}
	}
}

// openWindows returns the number of windows kept (not yet judged).
func (j *keyJudge) openWindows() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.windows)
}
