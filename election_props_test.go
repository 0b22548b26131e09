package redlock_test

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"pgregory.net/rapid"

	"github.com/d3b93e30/redlock"
)

// The model-based test of the election's invariants. rapid draws schedules
// of candidates (each with a Client of its own) that campaign, resign,
// crash (their extensions stop, the keys expire), and node faults that slow
// a node's replies past the per-node timeout (any number of nodes: that only
// costs availability), run them in fake time and checks, as they happen:
//
//   - single leader: when a candidate is elected, no other leadership's
//     context is still live;
//   - terms: each leader's term is above every earlier leader's;
//   - reads: with no fault in place and a leader live for a while, Leader
//     returns that leader's identity and term;
//
// and at the end, after every leader resigned: Leader reports no leader.
//
// REDLOCK_PROPS=n runs 2n schedules instead of the few of a normal run.
func TestElectionInvariants(t *testing.T) {
	checks := flag.Lookup("rapid.checks")
	old := checks.Value.String()
	if err := checks.Value.Set(strconv.Itoa(2 * propSchedules())); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = checks.Value.Set(old) }()
	rapid.Check(t, func(rt *rapid.T) {
		rapid.SyncTest(rt, func(rt *rapid.T) { runElectionSchedule(rt) })
	})
}

// electProp is one candidate of a schedule.
type electProp struct {
	id     string
	client *redlock.Client
	cancel context.CancelFunc // ends its campaign, or crashes its leadership
	done   chan struct{}      // closed when its campaign goroutine returned
	lead   *redlock.Leadership
}

type electModel struct {
	t     *rapid.T
	nodes []*testNode
	cands []*electProp

	mu       sync.Mutex
	leaders  []*redlock.Leadership // every leadership, in election order
	maxTerm  uint64
	failures []string
}

func (m *electModel) fail(format string, args ...any) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures = append(m.failures, fmt.Sprintf(format, args...))
}

// elected checks a new leadership against the others.
func (m *electModel) elected(l *redlock.Leadership) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.leaders {
		if o.Err() == nil {
			m.failures = append(m.failures, fmt.Sprintf("%s elected (term %d) while %s (term %d) still leads", l.Identity(), l.Term(), o.Identity(), o.Term()))
		}
	}
	if l.Term() <= m.maxTerm {
		m.failures = append(m.failures, fmt.Sprintf("%s elected with term %d, not above %d", l.Identity(), l.Term(), m.maxTerm))
	}
	m.maxTerm = max(m.maxTerm, l.Term())
	m.leaders = append(m.leaders, l)
}

func runElectionSchedule(rt *rapid.T) {
	n := rapid.SampledFrom([]int{3, 5}).Draw(rt, "nodes")
	k := rapid.IntRange(2, 4).Draw(rt, "candidates")
	ttl := rapid.SampledFrom([]time.Duration{time.Second, 3 * time.Second}).Draw(rt, "ttl")
	m := &electModel{t: rt}
	clients := make([]redis.UniversalClient, n)
	for i := range n {
		nd := newTestNode(rt, i)
		m.nodes = append(m.nodes, nd)
		clients[i] = nd.rc
	}
	for i := range k {
		rl, err := redlock.New(clients, redlock.WithRetry(redlock.ExponentialRetry(10*time.Millisecond, 500*time.Millisecond, 0)))
		if err != nil {
			rt.Fatal(err)
		}
		m.cands = append(m.cands, &electProp{id: fmt.Sprintf("cand-%d", i), client: rl})
	}
	ctx := context.Background()
	faulty := false
	steps := rapid.IntRange(5, 25).Draw(rt, "steps")
	for range steps {
		c := m.cands[rapid.IntRange(0, k-1).Draw(rt, "candidate")]
		switch rapid.SampledFrom([]string{"campaign", "campaign", "resign", "sleep", "slow", "heal", "read"}).Draw(rt, "op") {
		case "campaign":
			if c.done != nil {
				continue // campaigning or leading
			}
			cctx, cancel := context.WithCancel(ctx)
			c.cancel, c.done = cancel, make(chan struct{})
			done := c.done
			go func() {
				defer close(done)
				l, err := c.client.Campaign(cctx, "e", c.id, ttl)
				if err != nil {
					return // the campaign was ended
				}
				m.elected(l)
				m.mu.Lock()
				c.lead = l
				m.mu.Unlock()
			}()
		case "resign", "crash":
			if c.done == nil {
				continue
			}
			crash := rapid.Bool().Draw(rt, "crash")
			m.mu.Lock()
			l := c.lead
			m.mu.Unlock()
			if l == nil || crash {
				// Give up the campaign, or crash the leader: its context
				// ends, its extensions stop, its keys expire at the TTL.
				c.cancel()
				<-c.done
			} else if err := l.Resign(ctx); err != nil && !faulty && l.Err() == nil {
				m.fail("%s: resign of a live leadership: %v", c.id, err)
			}
			c.cancel()
			c.done, c.lead = nil, nil
		case "sleep":
			time.Sleep(rapid.SampledFrom([]time.Duration{10 * time.Millisecond, ttl / 3, ttl, 2 * ttl}).Draw(rt, "sleep"))
		case "slow":
			// The first few nodes: a minority or a majority of them.
			d := rapid.SampledFrom([]time.Duration{50 * time.Millisecond, 2 * time.Second}).Draw(rt, "delay")
			for _, nd := range m.nodes[:rapid.IntRange(1, n).Draw(rt, "slow nodes")] {
				nd.Slow(d)
			}
			faulty = true
		case "heal":
			for _, nd := range m.nodes {
				nd.Slow(0)
			}
			faulty = false
		case "read":
			synctest.Wait()
			m.checkRead(ctx, faulty)
		}
		synctest.Wait()
	}
	// Crash one leader, if any, then end every campaign and leadership.
	for _, c := range m.cands {
		m.mu.Lock()
		l := c.lead
		m.mu.Unlock()
		if c.done != nil {
			c.cancel()
			<-c.done
		}
		if l != nil {
			_ = l.Resign(ctx)
		}
	}
	for _, nd := range m.nodes {
		nd.Slow(0)
	}
	time.Sleep(3 * ttl) // every key left by a slow node's late SET expires
	synctest.Wait()
	if _, err := m.cands[0].client.Leader(ctx, "e"); err != redlock.ErrNoLeader {
		m.fail("after every leader resigned and the TTL passed, Leader returned %v, want ErrNoLeader", err)
	}
	for _, c := range m.cands {
		if err := c.client.Close(); err != nil {
			rt.Error(err)
		}
	}
	synctest.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, f := range m.failures {
		rt.Error(f)
	}
}

// checkRead compares Leader with the live leadership, when no fault is in
// place and the leadership has been live for a while (its write-back and
// extensions settled).
func (m *electModel) checkRead(ctx context.Context, faulty bool) {
	if faulty {
		return
	}
	m.mu.Lock()
	var live *redlock.Leadership
	for _, l := range m.leaders {
		if l.Err() == nil {
			live = l
		}
	}
	m.mu.Unlock()
	got, err := m.cands[0].client.Leader(ctx, "e")
	switch {
	case live == nil:
		// A crashed leader's keys may still be there: nothing to compare.
	case err != nil:
		m.fail("Leader: %v while %s leads", err, live.Identity())
	case got != (redlock.Leader{Identity: live.Identity(), Term: live.Term()}):
		m.fail("Leader read %+v while %s leads with term %d", got, live.Identity(), live.Term())
	}
}
