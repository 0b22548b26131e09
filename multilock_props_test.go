package redlock_test

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

// The model-based test of the multi-key lock. rapid draws schedules of
// clients (each with a Client of its own) that lock overlapping key sets
// ({a,b}, {b,c}, {c,a}, {a,b,c}) with AcquireMulti and single keys with
// Acquire, extend, release, and node faults within the documented limits
// (slow nodes, a node killed and restarted, one node that loses its data
// with the amnesia guard on), in fake time, and checks as they happen:
//
//   - exclusion: when a client acquires, no other client holds a handle
//     with positive validity on any of its keys;
//   - tokens: each key's token is above that of every earlier holder of
//     the key, single-key or multi-key;
//
// and at the end of a schedule without faults, once every lock was
// released and every Client closed: no node holds any key (a partial
// grant, or a failed attempt's clean-up that missed a key, would show);
// and after any schedule, once the faults are healed and the keys expired,
// {a,b,c} can be locked: no deadlock.
//
// REDLOCK_PROPS=n runs n schedules instead of the few of a normal run.
func TestMultiLockInvariants(t *testing.T) {
	checks := flag.Lookup("rapid.checks")
	old := checks.Value.String()
	if err := checks.Value.Set(strconv.Itoa(propSchedules())); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = checks.Value.Set(old) }()
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) { runMultiSchedule(rt) })
	})
}

// multiHeld is a lock a client of a schedule holds: one key or several.
type multiHeld struct {
	keys     []string
	tokens   []uint64
	validity func() time.Duration
	release  func(context.Context) error
	extend   func(context.Context, time.Duration) (*multiHeld, error)
}

type multiClient struct {
	id     string
	client *redlock.Client
	cancel context.CancelFunc
	done   chan struct{} // closed when its acquisition returned
	held   *multiHeld    // under the model's mutex
}

type multiModel struct {
	mu       sync.Mutex
	clients  []*multiClient
	maxToken map[string]uint64
	failures []string
}

func (m *multiModel) fail(format string, args ...any) {
	m.failures = append(m.failures, fmt.Sprintf(format, args...))
}

// acquired checks a new holder against the others, under m.mu.
func (m *multiModel) acquired(c *multiClient, h *multiHeld) {
	for _, o := range m.clients {
		if o == c || o.held == nil || o.held.validity() <= 0 {
			continue
		}
		for _, k := range h.keys {
			if slices.Contains(o.held.keys, k) {
				m.fail("%s acquired %v while %s holds %v (validity %v)", c.id, h.keys, o.id, o.held.keys, o.held.validity())
			}
		}
	}
	for i, k := range h.keys {
		if h.tokens[i] <= m.maxToken[k] {
			m.fail("%s acquired %q with token %d, not above %d", c.id, k, h.tokens[i], m.maxToken[k])
		}
		m.maxToken[k] = max(m.maxToken[k], h.tokens[i])
	}
	c.held = h
}

func heldMulti(ml *redlock.MultiLock) *multiHeld {
	return &multiHeld{
		keys: ml.Keys(), tokens: ml.Tokens(), validity: ml.Validity, release: ml.Release,
		extend: func(ctx context.Context, ttl time.Duration) (*multiHeld, error) {
			n, err := ml.Extend(ctx, ttl)
			if err != nil {
				return nil, err
			}
			return heldMulti(n), nil
		},
	}
}

func heldSingle(l *redlock.Lock) *multiHeld {
	return &multiHeld{
		keys: []string{l.Key()}, tokens: []uint64{l.Token()}, validity: l.Validity, release: l.Release,
		extend: func(ctx context.Context, ttl time.Duration) (*multiHeld, error) {
			n, err := l.Extend(ctx, ttl)
			if err != nil {
				return nil, err
			}
			return heldSingle(n), nil
		},
	}
}

var multiKeySets = [][]string{{"a", "b"}, {"b", "c"}, {"c", "a"}, {"a", "b", "c"}, {"a"}, {"b"}, {"c"}}

func runMultiSchedule(rt *rapid.T) {
	n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
	k := rapid.IntRange(2, 4).Draw(rt, "clients")
	ttl := rapid.SampledFrom([]time.Duration{time.Second, 3 * time.Second}).Draw(rt, "ttl")
	guard := rapid.Bool().Draw(rt, "guard")
	opts := []redlock.Option{redlock.WithRetry(redlock.ExponentialRetry(10*time.Millisecond, 300*time.Millisecond, 0))}
	if guard {
		opts = append(opts, redlock.WithQuarantine(time.Minute))
	} else {
		opts = append(opts, redlock.WithoutAmnesiaGuard())
	}
	nodes := make([]*testNode, n)
	clients := make([]redis.UniversalClient, n)
	for i := range n {
		nodes[i] = newTestNode(rt, i)
		clients[i] = nodes[i].rc
	}
	m := &multiModel{maxToken: map[string]uint64{}}
	for i := range k {
		rl, err := redlock.New(clients, opts...)
		if err != nil {
			rt.Fatal(err)
		}
		m.clients = append(m.clients, &multiClient{id: fmt.Sprintf("client-%d", i), client: rl})
	}
	ctx := context.Background()
	faults, lost := false, false
	steps := rapid.IntRange(5, 30).Draw(rt, "steps")
	for range steps {
		c := m.clients[rapid.IntRange(0, k-1).Draw(rt, "client")]
		m.mu.Lock()
		held := c.held
		m.mu.Unlock()
		switch rapid.SampledFrom([]string{"acquire", "acquire", "acquire", "release", "extend", "sleep", "slow", "kill", "lose", "heal"}).Draw(rt, "op") {
		case "acquire":
			if c.done != nil {
				continue // acquiring or holding
			}
			keys := rapid.SampledFrom(multiKeySets).Draw(rt, "keys")
			try := rapid.Bool().Draw(rt, "try")
			actx, cancel := context.WithTimeout(ctx, 2*ttl)
			c.cancel, c.done = cancel, make(chan struct{})
			done := c.done
			go func() {
				defer close(done)
				var h *multiHeld
				if len(keys) == 1 {
					acq := c.client.Acquire
					if try {
						acq = c.client.TryAcquire
					}
					l, err := acq(actx, keys[0], ttl)
					if err != nil {
						return
					}
					h = heldSingle(l)
				} else {
					acq := c.client.AcquireMulti
					if try {
						acq = c.client.TryAcquireMulti
					}
					ml, err := acq(actx, keys, ttl)
					if err != nil {
						return
					}
					h = heldMulti(ml)
				}
				m.mu.Lock()
				m.acquired(c, h)
				m.mu.Unlock()
			}()
		case "release":
			if c.done == nil {
				continue
			}
			<-c.done
			// Read again: an acquisition still running when the step
			// began has ended now, and its lock must be released.
			m.mu.Lock()
			held = c.held
			m.mu.Unlock()
			if held != nil {
				_ = held.release(ctx)
			}
			c.cancel()
			m.mu.Lock()
			c.done, c.held = nil, nil
			m.mu.Unlock()
		case "extend":
			if held == nil {
				continue
			}
			if next, err := held.extend(ctx, ttl); err == nil {
				m.mu.Lock()
				c.held = next
				m.mu.Unlock()
			}
		case "sleep":
			time.Sleep(rapid.SampledFrom([]time.Duration{10 * time.Millisecond, ttl / 3, ttl, 2 * ttl}).Draw(rt, "sleep"))
		case "slow":
			d := rapid.SampledFrom([]time.Duration{50 * time.Millisecond, 2 * time.Second}).Draw(rt, "delay")
			for _, nd := range nodes[:rapid.IntRange(1, n).Draw(rt, "slow nodes")] {
				nd.Slow(d)
			}
			faults = true
		case "kill":
			i := rapid.IntRange(0, n/2-1).Draw(rt, "killed") // a minority
			nodes[i].Refuse()
			time.Sleep(rapid.SampledFrom([]time.Duration{100 * time.Millisecond, ttl}).Draw(rt, "down"))
			nodes[i].Revive(rt)
			faults = true
		case "lose":
			// One node, once, loses its data: within the guard's limits
			// (a minority within one quarantine).
			if !guard || lost {
				continue
			}
			nodes[0].Refuse()
			nodes[0].m.FlushAll()
			time.Sleep(propRestart)
			nodes[0].Revive(rt)
			lost, faults = true, true
		case "heal":
			for _, nd := range nodes {
				nd.Slow(0)
			}
		}
		synctest.Wait()
	}
	for _, c := range m.clients {
		if c.done == nil {
			continue
		}
		<-c.done
		m.mu.Lock()
		h := c.held
		m.mu.Unlock()
		if h != nil {
			if err := h.release(ctx); err != nil && !faults && h.validity() > 0 {
				m.fail("%s: release of %v: %v", c.id, h.keys, err)
			}
		}
		c.cancel()
	}
	for _, nd := range nodes {
		nd.Slow(0)
	}
	synctest.Wait()
	if !faults {
		for _, c := range m.clients {
			if err := c.client.Close(); err != nil {
				rt.Error(err)
			}
		}
		synctest.Wait()
		for i, nd := range nodes {
			for _, key := range []string{"a", "b", "c"} {
				if nd.Has(key) {
					m.fail("node %d still holds %q (%q) after every lock was released", i, key, nd.Value(key))
				}
			}
		}
	}
	// No deadlock: once the keys expired, all three can be locked at once.
	time.Sleep(3 * ttl)
	last, err := redlock.New(clients, opts...)
	if err != nil {
		rt.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, time.Minute+2*ttl) // a quarantine at most
	ml, err := last.AcquireMulti(lctx, []string{"a", "b", "c"}, ttl)
	cancel()
	if err != nil {
		m.fail("after every lock ended and the keys expired, {a,b,c}: %v", err)
	} else {
		_ = ml.Release(ctx)
	}
	for _, c := range m.clients {
		_ = c.client.Close()
	}
	_ = last.Close()
	synctest.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.failures {
		rt.Error(strings.TrimSpace(f))
	}
}
