package chaos

// The read/write lock trials: readers and writers of one redlock.RWMutex
// under faults, judged by their own oracle: a writer's hold (from its
// acquisition to its release or the end of its validity) never overlaps
// another hold, readers' holds may overlap each other, a writer's token is
// above every token handed out before it, and a reader's token is at least
// the last writer's. The resource is fenced by the rule for readers and
// writers (docs/fencing.md, fencing.RWRegister). RWMutants are
// the mutants these trials must catch.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// RWScenario is one read/write lock trial: Readers and Writers clients
// loop on one RWMutex over the cluster's nodes for Duration while Fault
// runs.
type RWScenario struct {
	Name    string
	Summary string
	Readers int
	Writers int
	TTL     time.Duration
	Hold    time.Duration // how long each client holds before it releases
	// Duration is how long the clients loop.
	Duration time.Duration
	// StallWriter makes writer 0's second hold pause for Stall before it
	// writes (a GC pause, a swapped-out process): past its validity.
	Stall time.Duration
	// Fault, when set, runs beside the clients (it returns by the trial's
	// end); proxies are each client's proxies to the nodes, readers first.
	Fault func(ctx context.Context, c *Cluster, proxies [][]*Proxy) error
	// Quarantine turns the amnesia guard on with that quarantine.
	Quarantine time.Duration
}

// RWScenarios returns the read/write lock scenarios.
func RWScenarios() []RWScenario {
	base := RWScenario{Readers: 3, Writers: 1, TTL: catalogueTTL, Hold: 30 * time.Millisecond, Duration: 3 * trialLength}
	contention := base
	contention.Name, contention.Summary = "rw-contention", "3 readers and a writer loop on one read/write lock"
	stalled := base
	stalled.Name, stalled.Summary = "rw-stalled-writer", "a writer pauses past its validity, then writes: the fenced resource refuses it"
	stalled.Stall = 2 * catalogueTTL
	stalled.Duration = 4 * trialLength
	restart := base
	restart.Name, restart.Summary = "rw-node-restart", "a node restarts (with its data) under readers and writers"
	restart.Fault = func(ctx context.Context, c *Cluster, _ [][]*Proxy) error {
		sleepCtx(ctx, trialLength/2)
		if err := c.Node(1).Kill(); err != nil {
			return err
		}
		sleepCtx(ctx, trialLength/2)
		return c.Node(1).Restart(context.WithoutCancel(ctx))
	}
	partition := base
	partition.Name, partition.Summary = "rw-partition", "a partition cuts the readers from nodes 0-1 and the writers from nodes 3-4: both sides keep a majority, sharing node 2"
	partition.Fault = func(ctx context.Context, c *Cluster, proxies [][]*Proxy) error {
		sleepCtx(ctx, trialLength/2)
		cut := func(down bool) error {
			for i, ps := range proxies {
				nodes := []int{0, 1}
				if i >= base.Readers {
					nodes = []int{3, 4}
				}
				for _, n := range nodes {
					var err error
					if down {
						err = ps[n].Down()
					} else {
						err = ps[n].Up()
					}
					if err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := cut(true); err != nil {
			return err
		}
		sleepCtx(ctx, trialLength)
		return cut(false)
	}
	return []RWScenario{contention, stalled, restart, partition}
}

// RWMutants returns the mutants of the read/write lock's scripts that the
// read/write scenarios must catch.
func RWMutants() []Mutant {
	return []Mutant{
		{Name: "rw-reader-ignores-writer", Summary: "a reader is granted while a writer holds (it still waits behind a waiting writer)",
			Scenarios: []string{"rw-contention"},
			rewrites:  []mutation.Rewrite{{Script: "rw-acquire", Old: "if w or waiting > 0 then", New: "if waiting > 0 then"}}},
		{Name: "rw-writer-ignores-readers", Summary: "a writer is granted while readers hold",
			Scenarios: []string{"rw-contention"},
			rewrites:  []mutation.Rewrite{{Script: "rw-acquire", Old: "if w or readers > 0 then", New: "if w then"}}},
		{Name: "rw-writer-token-not-above-readers", Summary: "a writer reads the fencing counter instead of incrementing it, so its token is the readers' before it",
			Scenarios: []string{"rw-contention"},
			rewrites: []mutation.Rewrite{{Script: "rw-acquire", Old: "c = seeded(KEYS[2], redis.call('INCR', KEYS[2]), r)",
				New: "c = tonumber(redis.call('GET', KEYS[2]) or '0')"}}},
	}
}

// RWResult is what one read/write trial observed.
type RWResult struct {
	Reads, Writes int // holds taken by readers and by writers
	// Violations counts pairs of holds that overlapped within their
	// validity with a writer among them.
	Violations int
	// TokenOrder counts writers whose token was not above every earlier
	// token, and readers whose token was below the last writer's.
	TokenOrder int
	// StaleRefused counts operations the fenced resource refused: a
	// stalled writer's write after a newer holder's operation, say.
	// StalePlain counts operations made after their hold's validity ended,
	// which a resource that checks no token would have taken.
	StaleRefused, StalePlain int
	Notes                    []string
}

type rwHold struct {
	client   int
	writer   bool
	token    uint64
	acquired time.Time
	end      time.Time // release, or the validity's end if sooner
}

type rwTrial struct {
	s     RWScenario
	mu    sync.Mutex
	holds []rwHold
	res   fencing.RWRegister
	out   RWResult
}

// RunRW runs one trial of s on cluster, with the mutant m unless it is nil.
func RunRW(ctx context.Context, cluster *Cluster, s RWScenario, m *Mutant, seed uint64) (RWResult, error) {
	n := s.Readers + s.Writers
	// Twice the catalogue's per-node timeout: on a loaded machine the
	// in-process nodes' replies under the race detector take most of 50 ms.
	w := Workload{Clients: n, TTL: s.TTL, NodeTimeout: 2 * catalogueNodeTimeout, Key: "rw-chaos", Quarantine: s.Quarantine}
	proxies := make([][]*Proxy, n)
	addrs := make([][]string, n)
	defer closeProxies(proxies)
	for i := range n {
		for _, nd := range cluster.Nodes() {
			p, err := NewProxy(nd.Addr())
			if err != nil {
				return RWResult{}, err
			}
			proxies[i] = append(proxies[i], p)
			addrs[i] = append(addrs[i], p.Addr())
		}
	}
	clients, err := w.connect(ctx, addrs, m)
	if err != nil {
		return RWResult{}, setupError(err)
	}
	defer closeClients(clients)
	st := &rwTrial{s: s}
	tctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var faultErr error
	if s.Fault != nil {
		wg.Go(func() { faultErr = s.Fault(tctx, cluster, proxies) })
	}
	for i, c := range clients {
		rw, err := c.RWMutex(w.Key)
		if err != nil {
			cancel()
			wg.Wait()
			return RWResult{}, err
		}
		wg.Go(func() { st.loop(tctx, rw, i, i >= s.Readers, rand.New(rand.NewPCG(seed, uint64(i)+1))) })
	}
	wg.Wait()
	if faultErr != nil {
		return RWResult{}, faultErr
	}
	if err := cluster.HealAll(context.WithoutCancel(ctx)); err != nil {
		return RWResult{}, err
	}
	return st.judge(), nil
}

// loop is one client: take the lock (a reader's or the writer's), use it
// for the hold time through its latest handle, release it, again.
func (st *rwTrial) loop(ctx context.Context, rw *redlock.RWMutex, i int, writer bool, rng *rand.Rand) {
	s := st.s
	for nth := 1; ctx.Err() == nil; nth++ {
		actx, cancel := context.WithTimeout(ctx, 4*s.TTL)
		var l *redlock.RWLock
		var err error
		if writer {
			l, err = rw.Lock(actx, s.TTL)
		} else {
			l, err = rw.RLock(actx, s.TTL)
		}
		cancel()
		if err != nil {
			st.mu.Lock()
			if len(st.out.Notes) < 3 {
				st.out.Notes = append(st.out.Notes, fmt.Sprintf("client %d: %v", i, err))
			}
			st.mu.Unlock()
			continue
		}
		if writer && s.Stall > 0 && i == s.Readers && nth == 2 {
			sleepCtx(ctx, s.Stall) // paused past the validity
			st.use(l, time.Now())
		}
		deadline := time.Now().Add(s.Hold)
		for time.Now().Before(deadline) && ctx.Err() == nil {
			st.use(l, time.Now())
			sleepCtx(ctx, 5*time.Millisecond)
		}
		released := time.Now()
		_ = l.Release(context.WithoutCancel(ctx))
		st.mu.Lock()
		st.holds = append(st.holds, rwHold{client: i, writer: writer, token: l.Token(), acquired: l.AcquiredAt(), end: minTime(released, l.ValidUntil())})
		st.mu.Unlock()
		sleepCtx(ctx, time.Duration(rng.Int64N(int64(5*time.Millisecond))))
	}
}

// use reads or writes the resource with l's token at, as a holder does.
func (st *rwTrial) use(l *redlock.RWLock, at time.Time) {
	check := st.res.CheckWrite
	if l.Shared() {
		check = st.res.CheckRead
	}
	ok := check(l.Token()) == nil
	st.mu.Lock()
	defer st.mu.Unlock()
	if !ok {
		st.out.StaleRefused++
	}
	if !at.Before(l.ValidUntil()) {
		st.out.StalePlain++
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// judge checks exclusion and the token rules over the holds.
func (st *rwTrial) judge() RWResult {
	out := st.out
	hs := slices.Clone(st.holds)
	slices.SortFunc(hs, func(a, b rwHold) int { return a.acquired.Compare(b.acquired) })
	var maxTok, lastW uint64
	for k, h := range hs {
		if h.writer {
			out.Writes++
		} else {
			out.Reads++
		}
		for _, o := range hs[:k] {
			if (h.writer || o.writer) && h.acquired.Before(o.end) && o.acquired.Before(h.end) {
				out.Violations++
				if out.Violations <= 3 {
					out.Notes = append(out.Notes, fmt.Sprintf("client %d (writer %v, token %d) held with client %d (writer %v, token %d)", h.client, h.writer, h.token, o.client, o.writer, o.token))
				}
			}
		}
		switch {
		case h.writer && h.token <= maxTok:
			out.TokenOrder++
		case !h.writer && h.token < lastW:
			out.TokenOrder++
		}
		if h.writer {
			lastW = h.token
		}
		maxTok = max(maxTok, h.token)
	}
	return out
}
