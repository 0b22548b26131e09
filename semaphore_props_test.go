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

// The model-based test of the semaphore. rapid draws the number of nodes
// and permits and a schedule of three clients' operations (TryAcquire, a
// waiting Acquire, Extend, Release, time passing so that permits expire)
// and node faults within the documented limits (a minority of the nodes
// down, and back with their data), runs it on in-process nodes in fake
// time, and after every step checks:
//
//   - capacity: at most permits handles with positive validity at once,
//     each on its own slot, every slot below permits;
//   - holding: such a handle's slot key holds its owner value on a
//     majority of the nodes;
//   - token order: each holder's token is above every earlier holder's of
//     the same slot;
//
// and, at the end, that once every handle is released no node that stayed
// up since the handle's acquisition began still holds its key.

// semModel is one schedule's world.
type semModel struct {
	t       *rapid.T
	n       int
	permits int
	nodes   []*testNode
	down    []bool
	upset   []time.Time // when each node last went down or came back
	sems    []*redlock.Semaphore
	handles []*semHandle
	tokens  map[int]uint64 // per slot: the highest token handed out
	steps   int
}

type semHandle struct {
	p        *redlock.Permit
	start    time.Time
	released bool
}

const semTTL = time.Second

func TestSemaphoreInvariants(t *testing.T) {
	checks := flag.Lookup("rapid.checks")
	old := checks.Value.String()
	if err := checks.Value.Set(strconv.Itoa(propSchedules())); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = checks.Value.Set(old) }()
	var schedules, steps, acquired int
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) {
			m := runSemSchedule(rt)
			schedules++
			steps += m.steps
			acquired += len(m.handles)
		})
	})
	t.Logf("%d schedules, %d steps, %d permits acquired", schedules, steps, acquired)
}

func runSemSchedule(t *rapid.T) *semModel {
	m := &semModel{t: t, n: rapid.SampledFrom([]int{3, 5}).Draw(t, "nodes"), permits: rapid.IntRange(1, 3).Draw(t, "permits"), tokens: map[int]uint64{}}
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
		sem, err := rl.Semaphore("sem", m.permits)
		if err != nil {
			t.Fatal(err)
		}
		m.sems = append(m.sems, sem)
	}
	t.Repeat(map[string]func(*rapid.T){
		"": func(*rapid.T) {
			m.steps++
			m.check()
		},
		"tryAcquire": func(t *rapid.T) { m.acquire(t, false) },
		"acquire":    func(t *rapid.T) { m.acquire(t, true) },
		"extend":     m.extend,
		"release":    m.release,
		"sleep": func(t *rapid.T) {
			time.Sleep(time.Duration(rapid.IntRange(1, 1500).Draw(t, "ms")) * time.Millisecond)
		},
		"kill":   m.kill,
		"revive": m.revive,
	})
	for _, h := range m.handles {
		if !h.released {
			h.released = true
			_ = h.p.Release(context.Background())
		}
	}
	time.Sleep(100 * time.Millisecond) // the deletes Release did not wait for
	for _, h := range m.handles {
		for i, nd := range m.nodes {
			if !m.down[i] && m.upset[i].Before(h.start) && nd.Value(h.p.Key()) == h.p.Owner() {
				t.Fatalf("node %d still holds %s of token %d after its release", i, h.p.Key(), h.p.Token())
			}
		}
	}
	return m
}

// live returns the handles not released whose validity is positive.
func (m *semModel) live() []*semHandle {
	var out []*semHandle
	for _, h := range m.handles {
		if !h.released && time.Now().Before(h.p.ValidUntil()) {
			out = append(out, h)
		}
	}
	return out
}

func (m *semModel) check() {
	live := m.live()
	if len(live) > m.permits {
		m.t.Fatalf("capacity: %d permits held at once, %d allowed", len(live), m.permits)
	}
	slots := map[int]bool{}
	for _, h := range live {
		s := h.p.Slot()
		if s < 0 || s >= m.permits || slots[s] {
			m.t.Fatalf("capacity: slot %d held twice or outside [0, %d)", s, m.permits)
		}
		slots[s] = true
		k := 0
		for _, nd := range m.nodes {
			if nd.Value(h.p.Key()) == h.p.Owner() {
				k++
			}
		}
		if k < m.n/2+1 {
			m.t.Fatalf("holding: slot %d's key holds the owner on %d of %d nodes", s, k, m.n)
		}
	}
}

func (m *semModel) acquire(t *rapid.T, wait bool) {
	sem := rapid.SampledFrom(m.sems).Draw(t, "client")
	start := time.Now()
	var p *redlock.Permit
	var err error
	if wait {
		ctx, cancel := context.WithTimeout(context.Background(), semTTL)
		p, err = sem.Acquire(ctx, semTTL)
		cancel()
	} else {
		p, err = sem.TryAcquire(context.Background(), semTTL)
	}
	if err != nil {
		return
	}
	if last := m.tokens[p.Slot()]; p.Token() <= last {
		t.Fatalf("token order: slot %d gave token %d after %d", p.Slot(), p.Token(), last)
	}
	m.tokens[p.Slot()] = p.Token()
	m.handles = append(m.handles, &semHandle{p: p, start: start})
}

func (m *semModel) pick(t *rapid.T) *semHandle {
	var open []*semHandle
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

func (m *semModel) extend(t *rapid.T) {
	h := m.pick(t)
	p, err := h.p.Extend(context.Background(), semTTL)
	if err == nil {
		h.p = p
	}
}

func (m *semModel) release(t *rapid.T) {
	h := m.pick(t)
	h.released = true
	_ = h.p.Release(context.Background())
}

func (m *semModel) kill(t *rapid.T) {
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

func (m *semModel) revive(t *rapid.T) {
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
