package chaos

// The semaphore workload: the clients take permits of one counting
// semaphore (redlock.Semaphore, Workload.Permits) instead of the lock.
// Each slot of the semaphore is a Redlock mutex, so the trial keeps one
// oracle and one fenced resource per slot (a slot's tokens are its own),
// and a capacity check over all of them: the acted intervals of the holds
// (acquisition to release, validity, or last write) never overlap more
// than Permits deep. A capacity excess, or two holders of one slot, is a
// violation (Unsafe); a stale write a slot's fenced resource accepted is a
// broken promise, as for the lock.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// SemaphoreScenarios returns the scenarios whose clients take permits of a
// semaphore (Workload.Permits) rather than the lock. Find finds them too.
func SemaphoreScenarios() []Scenario {
	// Four clients hold a permit most of the time (long holds, short
	// gaps), so that three holders at once, or two on one slot, would
	// happen in any trial if the semaphore allowed it.
	contended := Workload{Clients: 4, Permits: 2, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout,
		Hold: 50 * time.Millisecond, WriteEvery: 5 * time.Millisecond, Gap: 2 * time.Millisecond,
		AcquireTimeout: 4 * catalogueTTL, Modes: []Mode{ModeAcquire, ModeDo, ModeKeepAlive}}
	return []Scenario{
		{
			Name: "semaphore-contention", Summary: "4 clients contend for the 2 permits of a semaphore (Acquire, Do, KeepAlive)",
			Expect: Safe, Why: "each permit is the Redlock mutex of one of 2 slots: two holders of a slot would be two holders of one lock",
			Workload: contended, Duration: trialLength, Availability: Available,
		},
		{
			Name: "semaphore-minority-killed", Summary: "4 clients on the 2 permits of a semaphore while a random minority of nodes is killed",
			Expect: Safe, Why: "every slot's quorum still intersects every other quorum of that slot",
			Workload: contended, Duration: trialLength, Availability: Available,
			Faults: []Fault{{At: trialLength / 4, Nodes: NodeSet{Pick: PickRandomMinority}, Action: ActionKill}},
		},
	}
}

// AsSemaphore returns s run with a semaphore of permits permits: every
// client takes permits of the semaphore named by the workload's key (exec
// and election clients use Acquire), and the faults, checks and expected
// verdict stay the same. A lock scenario's single holder becomes one of
// permits, so where the lock is safe the semaphore must not exceed its
// permits, and where it is not, each slot's fenced resource must still
// refuse stale tokens.
func AsSemaphore(s Scenario, permits int) Scenario {
	w := s.Workload
	w.Permits = permits
	if isElectionMode(w.mode(0)) || w.Key == redlock.ElectionKey("chaos") {
		w.Key = ""
	}
	s.Workload = w
	s.Summary = fmt.Sprintf("as a semaphore of %d permits: %s", permits, s.Summary)
	return s
}

// slotState is what the trial records about one slot: its oracle and its
// fenced resource.
type slotState struct {
	o   *oracle.Oracle
	res resources
}

// semTrial is one semaphore trial's record.
type semTrial struct {
	w      Workload
	main   *oracle.Oracle // failures, faults, notes
	mu     sync.Mutex
	slots  map[int]*slotState
	tokens bool
}

func (st *semTrial) slot(i int) *slotState {
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.slots[i]
	if !ok {
		s = &slotState{o: oracle.NewOracle(), res: newResources()}
		if st.tokens {
			s.o.ExpectTokens()
		}
		s.o.Declare(st.w.Clients, 0)
		st.slots[i] = s
	}
	return s
}

// runSemaphoreTrial is runTrial for a workload with Permits.
func runSemaphoreTrial(ctx context.Context, cluster *Cluster, s Scenario, m *Mutant, seed uint64) (trialResult, error) {
	w := s.Workload
	proxies, addrs, err := clientProxies(cluster, s)
	if err != nil {
		return trialResult{}, err
	}
	defer closeProxies(proxies)
	clients, err := w.connect(ctx, addrs, m)
	if err != nil {
		return trialResult{}, setupError(err)
	}
	defer closeClients(clients)
	// Every slot gets the history a key in use has (see giveHistory).
	for i := range w.Permits + 1 {
		key := redlock.PermitKey(w.key(), i)
		hw := w
		hw.Key = key
		if err := hw.giveHistory(ctx, clients[0]); err != nil {
			return trialResult{}, setupError(fmt.Errorf("chaos: slot %d has no history: %w", i, err))
		}
		if err := cluster.deleteKey(ctx, key); err != nil {
			return trialResult{}, setupError(err)
		}
	}
	sems := make([]*redlock.Semaphore, len(clients))
	for i, c := range clients {
		if sems[i], err = c.Semaphore(w.key(), w.Permits); err != nil {
			return trialResult{}, err
		}
	}
	st := &semTrial{w: w, main: oracle.NewOracle(), slots: map[int]*slotState{}, tokens: !w.NoFencing}
	st.main.Declare(w.Clients, len(cluster.Nodes()))
	inj := newInjector(cluster, st.main, seed)
	inj.clientProxies = proxies
	tctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()
	triggered, err := inj.scheduleFaults(tctx, s.Faults)
	if err != nil {
		return trialResult{}, err
	}
	checks := newHandoutChecks(s, len(cluster.Nodes()))
	w.runClients(tctx, func(a acquisition) {
		checks.record(a)
		inj.trigger(tctx, triggered, a)
	}, func(i int, fire func(acquisition)) {
		h := &semHolder{st: st, i: i, sem: sems[i], rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), fire: fire}
		h.loop(tctx)
	})
	cancel()
	inj.stop()
	var errs []error
	for _, sl := range st.slots {
		errs = append(errs, sl.res.err())
	}
	if err := errors.Join(append(errs, inj.firstErr())...); err != nil {
		return trialResult{}, err
	}
	return st.judge(s, len(cluster.Nodes()), checks), nil
}

// judge sums the slots' reports into one, with the capacity excesses
// counted as violations.
func (st *semTrial) judge(s Scenario, nodes int, checks *handoutChecks) trialResult {
	rep := st.main.Report()
	hist := st.main.History()
	type span struct{ from, to time.Duration }
	var spans []span
	for _, i := range slices.Sorted(func(yield func(int) bool) {
		for i := range st.slots {
			if !yield(i) {
				return
			}
		}
	}) {
		r, h := st.slots[i].o.Report(), st.slots[i].o.History()
		rep.Acquisitions += r.Acquisitions
		rep.Releases += r.Releases
		rep.Violations += r.Violations
		rep.BelievedViolations += r.BelievedViolations
		rep.ViolationList = append(rep.ViolationList, r.ViolationList...)
		rep.Writes += r.Writes
		rep.StaleWritesPlain += r.StaleWritesPlain
		rep.StaleWritesFenced += r.StaleWritesFenced
		rep.RejectedWritesFenced += r.RejectedWritesFenced
		rep.ExtendedHolds += r.ExtendedHolds
		rep.TokenOrderViolations += r.TokenOrderViolations
		// The slots' oracles start later than the trial's: shift their
		// offsets onto its clock.
		shift := st.slots[i].o.Start().Sub(st.main.Start())
		for _, x := range h.Holds {
			x.Acquired, x.ValidUntil, x.Released = x.Acquired+shift, x.ValidUntil+shift, x.Released+shift
			x.BelievedEnd, x.ActedEnd = x.BelievedEnd+shift, x.ActedEnd+shift
			x.ID = oracle.HoldID(len(hist.Holds) + 1)
			hist.Holds = append(hist.Holds, x)
			if x.ActedEnd > x.Acquired {
				spans = append(spans, span{x.Acquired, x.ActedEnd})
			}
		}
	}
	tr := trialResult{report: rep, history: hist, expiredHandouts: checks.expired, nodes: nodes}
	tr.notes = append(tr.notes, checks.tooValid...)
	// Capacity: sweep the acted intervals; each start that finds Permits
	// others still running is one excess.
	slices.SortFunc(spans, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var running []time.Duration // ends of the intervals still running
	excess := 0
	for _, sp := range spans {
		running = slices.DeleteFunc(running, func(end time.Duration) bool { return end <= sp.from })
		running = append(running, sp.to)
		if len(running) > st.w.Permits {
			if excess == 0 {
				tr.info = append(tr.info, fmt.Sprintf("%d permits held at once at %v (%d allowed)", len(running), sp.from.Round(time.Millisecond), st.w.Permits))
			}
			excess++
		}
	}
	tr.report.Violations += excess
	for _, x := range hist.Holds {
		tr.latencies = append(tr.latencies, x.Latency)
	}
	if len(st.slots) > st.w.Permits {
		tr.info = append(tr.info, fmt.Sprintf("%d slots were used (%d permits)", len(st.slots), st.w.Permits))
	}
	return tr
}

// semHolder is one client of a semaphore trial.
type semHolder struct {
	st   *semTrial
	i    int
	sem  *redlock.Semaphore
	rng  *rand.Rand
	fire func(acquisition)
}

func (h *semHolder) loop(ctx context.Context) {
	w := h.st.w
	for n := 1; ctx.Err() == nil && (w.MaxAcquires == 0 || n <= w.MaxAcquires); {
		if !h.hold(ctx, n) {
			continue
		}
		n++
		if w.Gap > 0 {
			sleepCtx(ctx, w.Gap+time.Duration(h.rng.Int64N(int64(w.Gap)+1)))
		}
	}
}

// hold is one permit: taken with Acquire (kept by its validity, or by
// KeepAlive) or with Do, written under, and released. It reports whether a
// permit was taken.
func (h *semHolder) hold(ctx context.Context, n int) bool {
	w := h.st.w
	timeout := w.AcquireTimeout
	if timeout <= 0 {
		timeout = 2 * w.TTL
	}
	start := time.Now()
	if w.mode(h.i) == ModeDo {
		taken := false
		err := h.sem.Do(ctx, w.TTL, func(lctx context.Context, lease *redlock.Lease) error {
			taken = true
			h.work(ctx, n, lease.Lock(), slotOf(lease.Key()), start, func() *redlock.Lock {
				if lctx.Err() != nil {
					return nil
				}
				return lease.Lock()
			})
			return nil
		})
		if !taken && err != nil && ctx.Err() == nil {
			h.failed(err, start)
		}
		return taken
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	p, err := h.sem.Acquire(actx, w.TTL)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			h.failed(err, start)
		}
		return false
	}
	current := func() *redlock.Lock {
		if time.Now().Before(p.ValidUntil()) {
			return p.Lock
		}
		return nil
	}
	var lease *redlock.Lease
	if w.mode(h.i) == ModeKeepAlive {
		if lease, err = p.KeepAlive(ctx); err == nil {
			current = func() *redlock.Lock {
				if lease.Context().Err() != nil {
					return nil
				}
				return lease.Lock()
			}
		}
	}
	h.work(ctx, n, p.Lock, p.Slot(), start, current)
	if lease != nil {
		_ = lease.Release(context.WithoutCancel(ctx))
	} else {
		_ = p.Release(context.WithoutCancel(ctx))
	}
	return true
}

// work records the permit (lock, on slot) with the slot's oracle, fires
// its trigger, pauses if the workload says so, and writes to the slot's
// resources while current returns the permit's latest handle, for the
// client's hold time.
func (h *semHolder) work(ctx context.Context, n int, lock *redlock.Lock, slot int, start time.Time, current func() *redlock.Lock) {
	w, sl := h.st.w, h.st.slot(slot)
	hold := sl.o.Acquired(h.i, lock.Token(), lock.AcquiredAt(), lock.ValidUntil(), lock.AcquiredAt().Sub(start), lock.Attempts())
	h.fire(acquisition{Client: h.i, Nth: n, Lock: lock})
	write := func(token uint64) {
		at := time.Now()
		sl.o.Wrote(hold, oracle.ResourcePlain, token, sl.res.writePlain(token), at)
		at = time.Now()
		ok := sl.res.writeFenced(token)
		sl.o.WroteSpan(hold, oracle.ResourceFenced, token, ok, at, time.Now())
	}
	if p := w.Pause; p != nil && p.Client == h.i && p.Nth == n {
		h.st.main.Note(time.Now(), "client "+strconv.Itoa(h.i)+" paused "+p.Length.String())
		sleepCtx(ctx, p.Length)
		write(lock.Token())
	}
	deadline := time.Now().Add(w.holdFor(h.i))
	for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
		l := current()
		if l == nil {
			break
		}
		if l != lock {
			lock = l
			sl.o.Extended(hold, l.ValidUntil())
		}
		write(lock.Token())
		sleepCtx(ctx, min(w.writeEvery(), time.Until(deadline)))
	}
	sl.o.Released(hold, time.Now())
}

func (h *semHolder) failed(err error, start time.Time) {
	attempts := 1
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		attempts = qe.Attempts
	}
	h.st.main.Failed(h.i, time.Now(), time.Since(start), attempts, err.Error())
}

// slotOf returns the slot of a permit's key, "...:permit:<slot>".
func slotOf(key string) int {
	for i := len(key) - 1; i >= 0; i-- {
		if key[i] == ':' {
			n, _ := strconv.Atoi(key[i+1:])
			return n
		}
	}
	return 0
}
