package chaos

// The read/write lock workload: the clients are the readers and writers of
// one redlock.RWMutex (Workload.Readers) instead of holders of the lock.
// The oracle judges them with shared holds (oracle.AcquiredShared): a
// writer's hold never overlaps another hold, readers' holds may overlap each
// other; a writer's token is above the previous holder's, a reader's at
// least the last writer's. Every hold uses the resources throughout, a
// reader reading and a writer writing, and the fenced resource is
// fencing.RWRegister, the rule for readers and writers (docs/fencing.md):
// it refuses a stale writer's write, a paused writer's late write after
// readers followed it, and a read that raced a newer write. Run runs these
// trials as any other; porcupine's cross-check, whose model is the lock's
// fenced register, is left out. RWScenarios are the scenarios, RWMutants
// the mutants they catch.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
	"github.com/d3b93e30/redlock/internal/mutation"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// rwFencedStore names the fenced resource of a read/write trial
// (Result.FencedStore): whatever the cluster's FencedStore, it is a
// fencing.RWRegister.
const rwFencedStore = "fencing.RWRegister (in process, read/write lock)"

// RWScenarios returns the scenarios of the read/write lock: 3 readers and a
// writer on one RWMutex, with no fault, a writer paused past its validity,
// a node restart and a partition that leaves readers and writers a
// majority each. Find finds them too.
func RWScenarios() []Scenario {
	// The per-node timeout is twice the catalogue's: on a loaded machine
	// the in-process nodes' replies under the race detector take most of
	// 50 ms.
	w := Workload{Clients: 4, Readers: 3, Key: "rw-chaos", TTL: catalogueTTL, NodeTimeout: 2 * catalogueNodeTimeout,
		Hold: 30 * time.Millisecond, WriteEvery: 5 * time.Millisecond, Gap: 2 * time.Millisecond, AcquireTimeout: 4 * catalogueTTL}
	writer := w.Readers // the writer's client
	stalled := w
	stalled.Pause = &Pause{Client: writer, Nth: 2, Length: 2 * catalogueTTL}
	return []Scenario{
		{
			Name: "rw-contention", Summary: "3 readers and a writer loop on one read/write lock; nothing fails",
			Expect: Safe, Why: "a node grants the writer only where no reader or writer is live, and a reader only where no writer holds or waits; two majorities share a node, so a writer never holds beside another holder. A writer's token is above every earlier one, a reader's is the last writer's",
			Workload: w, Duration: 2 * trialLength, Availability: Available,
		},
		{
			Name: "rw-stalled-writer", Summary: fmt.Sprintf("the writer freezes for %v (a GC pause) after its second acquisition, then writes; 3 readers loop", stalled.Pause.Length),
			Expect: Unsafe, Why: "Redlock's limit, as in client-pause: the writer's keys expire during the pause and the readers take the lock; the late write breaks exclusion. The fenced resource (fencing.RWRegister) refuses it: readers carrying its token have read since",
			Workload: stalled, Duration: 2 * trialLength, Availability: Available,
		},
		{
			Name: "rw-node-restart", Summary: fmt.Sprintf("3 readers and a writer while a random node is killed for %v (longer than the TTL), then restarted", trialLength/2),
			Expect: Safe, Why: "the other nodes still form a majority; the node comes back after every grant it made has expired, with its data or without, so it grants and refuses as the others do",
			Workload: w, Duration: 2 * trialLength, Availability: Available, MinNodes: 3,
			Faults: []Fault{{At: trialLength / 2, Nodes: NodeSet{Pick: PickRandom, Count: 1}, Action: ActionKill, For: trialLength / 2}},
		},
		{
			Name: "rw-partition", Summary: fmt.Sprintf("for %v the readers lose the first minority of the nodes and the writer the last: each keeps a majority, and the two share the overlap", trialLength),
			Expect: Safe, Why: "a reader's majority and the writer's still share a node, which grants one only while the other is not live there: readers and the writer take turns through it",
			Workload: w, Duration: 2 * trialLength, Availability: Available,
			Faults: []Fault{
				{At: trialLength / 2, Nodes: NodeSet{Pick: PickMinorityHead}, Clients: []int{0, 1, 2}, Action: ActionPartition, For: trialLength},
				{At: trialLength / 2, Nodes: NodeSet{Pick: PickMinorityTail}, Clients: []int{writer}, Action: ActionPartition, For: trialLength},
			},
		},
	}
}

// RWMutants returns the mutants of the read/write lock's scripts, which
// rw-contention must catch; Mutants includes them.
func RWMutants() []Mutant {
	return []Mutant{
		{Name: "rw-reader-ignores-writer", Summary: "a reader is granted while a writer holds (it still waits behind a waiting writer)",
			Scenarios: []string{"rw-contention"},
			rewrites:  []mutation.Rewrite{{Script: "rw-acquire", Old: "if w or waiting > 0 then", New: "if waiting > 0 then"}}},
		{Name: "rw-writer-ignores-readers", Summary: "a writer is granted while readers hold",
			Scenarios: []string{"rw-contention"},
			rewrites:  []mutation.Rewrite{{Script: "rw-acquire", Old: "if w or readers > 0 then", New: "if w then"}}},
		{Name: "rw-writer-token-not-raised", Summary: "a writer reads the fencing counter instead of incrementing it, so its token is the readers' before it",
			Scenarios: []string{"rw-contention"},
			rewrites: []mutation.Rewrite{{Script: "rw-acquire", Old: "c = seeded(KEYS[2], redis.call('INCR', KEYS[2]), r)",
				New: "c = tonumber(redis.call('GET', KEYS[2]) or '0')"}}},
	}
}

// checkRW returns an error when s asks a read/write workload for what it
// does not do.
func checkRW(s Scenario) error {
	w := s.Workload
	var not []string
	for _, c := range []struct {
		set  bool
		what string
	}{
		{w.Readers > w.Clients, "more readers than clients"},
		{w.Permits > 0, "Permits"}, {len(w.Modes) > 0, "Modes"},
		{w.Extend || w.ExtendReleased || w.ExtendLate > 0, "extensions"},
		{s.KeysReleased, "KeysReleased"}, {s.Extends, "Extends"}, {s.ElapsedSubtracted, "ElapsedSubtracted"},
	} {
		if c.set {
			not = append(not, c.what)
		}
	}
	if len(not) > 0 {
		return fmt.Errorf("chaos: %s: a read/write workload does not take %v", s.Name, not)
	}
	return nil
}

// runRWTrial is runTrial for a workload with Readers.
func runRWTrial(ctx context.Context, cluster *Cluster, s Scenario, m *Mutant, seed uint64) (trialResult, error) {
	if err := checkRW(s); err != nil {
		return trialResult{}, err
	}
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
	key := w.key()
	for _, k := range []string{key, redlock.RWReadersKey(key), redlock.RWWritersKey(key)} {
		if err := cluster.deleteKey(ctx, k); err != nil {
			return trialResult{}, setupError(err)
		}
	}
	rws := make([]*redlock.RWMutex, len(clients))
	for i, c := range clients {
		if rws[i], err = c.RWMutex(key); err != nil {
			return trialResult{}, err
		}
	}
	o := oracle.NewOracle()
	if !w.NoFencing {
		o.ExpectTokens()
	}
	o.Declare(w.Clients, len(cluster.Nodes()))
	inj := newInjector(cluster, o, seed)
	inj.clientProxies = proxies
	inj.key = key
	tctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()
	triggered, err := inj.scheduleFaults(tctx, s.Faults)
	if err != nil {
		return trialResult{}, err
	}
	checks := newHandoutChecks(s, len(cluster.Nodes()))
	reg := new(fencing.RWRegister)
	w.runClients(tctx, func(a acquisition) {
		checks.record(a)
		inj.trigger(tctx, triggered, a)
	}, func(i int, fire func(acquisition)) {
		h := &rwHolder{w: w, i: i, rw: rws[i], writer: i >= w.Readers, o: o, reg: reg,
			rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), fire: fire}
		h.loop(tctx)
	})
	cancel()
	inj.stop()
	if err := inj.firstErr(); err != nil {
		return trialResult{}, err
	}
	tr := trialResult{report: o.Report(), history: o.History(), expiredHandouts: checks.expired, nodes: len(cluster.Nodes())}
	tr.notes = append(tr.notes, checks.tooValid...)
	tr.finish(s)
	return tr, nil
}

// rwHolder is one client of a read/write trial: a reader or the writer.
type rwHolder struct {
	w       Workload
	i       int
	rw      *redlock.RWMutex
	writer  bool
	o       *oracle.Oracle
	reg     *fencing.RWRegister
	rng     *rand.Rand
	fire    func(acquisition)
	refused bool // the library refused the workload's settings: every call would
}

func (h *rwHolder) loop(ctx context.Context) {
	w := h.w
	for n := 1; !h.refused && ctx.Err() == nil && (w.MaxAcquires == 0 || n <= w.MaxAcquires); {
		if !h.hold(ctx, n) {
			continue
		}
		n++
		if w.Gap > 0 {
			sleepCtx(ctx, w.Gap+time.Duration(h.rng.Int64N(int64(w.Gap)+1)))
		}
	}
}

// hold is one hold: a read lock (RLock) or the write lock (Lock), recorded
// with the oracle, its trigger fired, paused if the workload says so (then
// used once, as a holder waking from a GC pause would), used while its
// validity lasts, up to the hold time, and released. It reports whether the
// lock was taken.
func (h *rwHolder) hold(ctx context.Context, n int) bool {
	w := h.w
	timeout := w.AcquireTimeout
	if timeout <= 0 {
		timeout = 2 * w.TTL
	}
	take, record := h.rw.RLock, h.o.AcquiredShared
	if h.writer {
		take, record = h.rw.Lock, h.o.Acquired
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	start := time.Now()
	l, err := take(actx, w.TTL)
	cancel()
	latency := time.Since(start)
	if err != nil {
		h.refused = errors.Is(err, redlock.ErrInvalidArgument)
		if ctx.Err() == nil {
			attempts := 1
			var qe *redlock.QuorumError
			if errors.As(err, &qe) {
				attempts = qe.Attempts
			}
			h.o.Failed(h.i, time.Now(), latency, attempts, err.Error())
		}
		return false
	}
	hold := record(h.i, l.Token(), l.AcquiredAt(), l.ValidUntil(), latency, l.Attempts())
	h.fire(acquisition{Client: h.i, Nth: n, Lock: l.Lock})
	if p := w.Pause; p != nil && p.Client == h.i && p.Nth == n {
		h.o.Note(time.Now(), "client "+strconv.Itoa(h.i)+" paused "+p.Length.String())
		sleepCtx(ctx, p.Length)
		h.use(hold, l)
	}
	deadline := time.Now().Add(w.holdFor(h.i))
	for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
		if !time.Now().Before(l.ValidUntil()) {
			break
		}
		h.use(hold, l)
		sleepCtx(ctx, min(w.writeEvery(), time.Until(deadline)))
	}
	h.o.Released(hold, time.Now())
	_ = l.Release(context.WithoutCancel(ctx))
	return true
}

// use reads (a reader) or writes (the writer) both resources with l's
// token: the plain one takes everything, the fenced one is the trial's
// fencing.RWRegister.
func (h *rwHolder) use(hold oracle.HoldID, l *redlock.RWLock) {
	token := l.Token()
	h.o.Wrote(hold, oracle.ResourcePlain, token, true, time.Now())
	check := h.reg.CheckWrite
	if l.Shared() {
		check = h.reg.CheckRead
	}
	at := time.Now()
	ok := check(token) == nil
	h.o.WroteSpan(hold, oracle.ResourceFenced, token, ok, at, time.Now())
}
