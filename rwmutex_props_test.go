package redlock_test

import (
	"context"
	"flag"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

// The model-based test of the read/write lock. rapid draws the number of
// nodes and a schedule of three clients' operations (TryRLock, TryLock,
// waiting RLock and Lock, Extend, Release, time passing so that holds
// expire) and node faults within the documented limits (a minority of the
// nodes down, and back with their data), runs it on in-process nodes in
// fake time, and after every step checks:
//
//   - exclusion: a writer with positive validity is the only holder with
//     positive validity (readers together are fine);
//   - holding: such a holder holds on a majority of the nodes (the writer
//     key holds its owner value, or its owner is a live reader there);
//   - tokens: a writer's token is above every token handed out before it,
//     readers' included; a reader's token is at least the token of every
//     writer handed out before it began (the last writer it follows);
//
// and, at the end, that once every handle is released no node that stayed
// up since a handle's acquisition began still holds it, no node up all
// along keeps a waiting writer's intent, and that once the
// TTLs have passed no node keeps a writer key, a reader or a waiting writer.

type rwModel struct {
	t       *rapid.T
	n       int
	nodes   []*testNode
	down    []bool
	upset   []time.Time
	mus     []*redlock.RWMutex
	handles []*rwHandle
	maxTok  uint64 // the highest token handed out so far
	lastW   uint64 // the highest writer token handed out so far
	steps   int
}

type rwHandle struct {
	l        *redlock.RWLock
	start    time.Time
	released bool
}

const rwTTL = time.Second

func TestRWMutexInvariants(t *testing.T) {
	checks := flag.Lookup("rapid.checks")
	old := checks.Value.String()
	if err := checks.Value.Set(strconv.Itoa(propSchedules())); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = checks.Value.Set(old) }()
	var schedules, steps, acquired, readers int
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := runRWSchedule(rt)
			schedules++
			steps += m.steps
			acquired += len(m.handles)
			for _, h := range m.handles {
				if h.l.Shared() {
					readers++
				}
			}
		})
	})
	t.Logf("%d schedules, %d steps, %d locks acquired (%d readers)", schedules, steps, acquired, readers)
}

func runRWSchedule(t *rapid.T) *rwModel {
	m := &rwModel{t: t, n: rapid.SampledFrom([]int{3, 5}).Draw(t, "nodes")}
	clients := make([]redis.UniversalClient, m.n)
	for i := range m.n {
		nd := newTestNode(t, i)
		m.nodes = append(m.nodes, nd)
		clients[i] = nd.rc
	}
	m.down, m.upset = make([]bool, m.n), make([]time.Time, m.n)
	t.Cleanup(func() {
		for _, nd := range m.nodes {
			_ = nd.rc.Close()
		}
		time.Sleep(2 * time.Second) // refused dials' re-dial loops end in the bubble
	})
	for range 3 {
		rl, err := redlock.New(clients, noGuard, redlock.WithNodeTimeout(50*time.Millisecond),
			redlock.WithRetry(redlock.ExponentialRetry(5*time.Millisecond, 100*time.Millisecond, 0)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = rl.Close() })
		mu, err := rl.RWMutex("rw")
		if err != nil {
			t.Fatal(err)
		}
		m.mus = append(m.mus, mu)
	}
	t.Repeat(map[string]func(*rapid.T){
		"": func(*rapid.T) {
			m.steps++
			m.check()
		},
		"tryRLock": func(t *rapid.T) { m.acquire(t, true, false) },
		"rlock":    func(t *rapid.T) { m.acquire(t, true, true) },
		"tryLock":  func(t *rapid.T) { m.acquire(t, false, false) },
		"lock":     func(t *rapid.T) { m.acquire(t, false, true) },
		"extend":   m.extend,
		"release":  m.release,
		"sleep": func(t *rapid.T) {
			time.Sleep(time.Duration(rapid.IntRange(1, 1500).Draw(t, "ms")) * time.Millisecond)
		},
		"kill":   m.kill,
		"revive": m.revive,
	})
	for _, h := range m.handles {
		if !h.released {
			h.released = true
			_ = h.l.Release(context.Background())
		}
	}
	time.Sleep(100 * time.Millisecond) // the deletes Release did not wait for
	for _, h := range m.handles {
		for i := range m.nodes {
			if !m.down[i] && m.upset[i].Before(h.start) && m.holdsOn(i, h) {
				t.Fatalf("node %d still holds the %s of token %d after its release", i, kind(h), h.l.Token())
			}
		}
	}
	for i, nd := range m.nodes {
		if m.upset[i].IsZero() && nd.Has(redlock.RWWritersKey("rw")) {
			t.Fatalf("node %d, up all along, keeps a waiting writer's intent once every Lock returned", i)
		}
	}
	time.Sleep(rwTTL + 1100*time.Millisecond) // every TTL, and the longest intent's life
	for i, nd := range m.nodes {
		for _, k := range []string{"rw", redlock.RWReadersKey("rw"), redlock.RWWritersKey("rw")} {
			if nd.Has(k) {
				t.Fatalf("node %d keeps %s after every TTL passed", i, k)
			}
		}
	}
	return m
}

func kind(h *rwHandle) string {
	if h.l.Shared() {
		return "reader"
	}
	return "writer"
}

// holdsOn reports whether node i holds h: the writer key holds its owner,
// or its owner is a reader there whose expiry has not passed.
func (m *rwModel) holdsOn(i int, h *rwHandle) bool {
	nd := m.nodes[i]
	if !h.l.Shared() {
		return nd.Value("rw") == h.l.Owner()
	}
	score, err := nd.m.ZScore(redlock.RWReadersKey("rw"), h.l.Owner())
	return err == nil && score > float64(time.Now().UnixMilli())
}

func (m *rwModel) live() []*rwHandle {
	var out []*rwHandle
	for _, h := range m.handles {
		if !h.released && time.Now().Before(h.l.ValidUntil()) {
			out = append(out, h)
		}
	}
	return out
}

func (m *rwModel) check() {
	live := m.live()
	for _, h := range live {
		if !h.l.Shared() && len(live) > 1 {
			m.t.Fatalf("exclusion: a writer (token %d) holds with %d other holders", h.l.Token(), len(live)-1)
		}
		k := 0
		for i := range m.nodes {
			if m.holdsOn(i, h) {
				k++
			}
		}
		if k < m.n/2+1 {
			m.t.Fatalf("holding: a %s of token %d holds on %d of %d nodes", kind(h), h.l.Token(), k, m.n)
		}
	}
}

func (m *rwModel) acquire(t *rapid.T, shared, wait bool) {
	mu := rapid.SampledFrom(m.mus).Draw(t, "client")
	start := time.Now()
	lastW := m.lastW
	var l *redlock.RWLock
	var err error
	ctx, cancel := context.WithTimeout(context.Background(), rwTTL)
	switch {
	case shared && wait:
		l, err = mu.RLock(ctx, rwTTL)
	case shared:
		l, err = mu.TryRLock(ctx, rwTTL)
	case wait:
		l, err = mu.Lock(ctx, rwTTL)
	default:
		l, err = mu.TryLock(ctx, rwTTL)
	}
	cancel()
	if err != nil {
		return
	}
	if shared {
		if l.Token() < lastW {
			t.Fatalf("tokens: a reader got token %d below the last writer's %d", l.Token(), lastW)
		}
	} else {
		if l.Token() <= m.maxTok {
			t.Fatalf("tokens: a writer got token %d, not above the %d handed out before", l.Token(), m.maxTok)
		}
		m.lastW = l.Token()
	}
	m.maxTok = max(m.maxTok, l.Token())
	m.handles = append(m.handles, &rwHandle{l: l, start: start})
}

func (m *rwModel) pick(t *rapid.T) *rwHandle {
	var open []*rwHandle
	for _, h := range m.handles {
		if !h.released {
			open = append(open, h)
		}
	}
	if len(open) == 0 {
		t.Skip("no handle")
	}
	return rapid.SampledFrom(open).Draw(t, "handle")
}

func (m *rwModel) extend(t *rapid.T) {
	h := m.pick(t)
	if l, err := h.l.Extend(context.Background(), rwTTL); err == nil {
		h.l = l
	}
}

func (m *rwModel) release(t *rapid.T) {
	h := m.pick(t)
	h.released = true
	_ = h.l.Release(context.Background())
}

func (m *rwModel) kill(t *rapid.T) {
	var up []int
	for i, d := range m.down {
		if !d {
			up = append(up, i)
		}
	}
	if m.n-len(up) >= (m.n-1)/2 {
		t.Skip("a majority stays up")
	}
	i := rapid.SampledFrom(up).Draw(t, "node")
	m.nodes[i].Refuse()
	m.down[i], m.upset[i] = true, time.Now()
}

func (m *rwModel) revive(t *rapid.T) {
	var down []int
	for i, d := range m.down {
		if d {
			down = append(down, i)
		}
	}
	if len(down) == 0 {
		t.Skip("none down")
	}
	i := rapid.SampledFrom(down).Draw(t, "node")
	m.nodes[i].Revive(t)
	m.down[i], m.upset[i] = false, time.Now()
}
