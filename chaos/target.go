package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/faultlog"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// Locker is one workload client's handle on a lock service other than this
// package's Redlock clients, for RunTarget: an etcd session, another Redlock
// library. Its acquisitions carry a fencing token and a way to learn that the
// lock may be lost.
type Locker interface {
	// Acquire blocks until the lock on key is held, ctx ends, or the
	// service fails. ttl is the lease the lock lives on if the holder stops
	// renewing it.
	Acquire(ctx context.Context, key string, ttl time.Duration) (Held, error)
}

// Held is one successful acquisition of a Locker. The holder believes it
// holds the lock until Done is closed or it releases the lock. A Held that
// also has a method Granted() []int names the nodes that granted it, for a
// fault that picks PickGranted.
type Held interface {
	// Token is the fencing token: it strictly increases across successive
	// holders of the key.
	Token() uint64
	// Done is closed when the holder learns that it may have lost the lock.
	// It need not be closed by Release.
	Done() <-chan struct{}
	// Release gives the lock up.
	Release(ctx context.Context) error
}

// Target is a lock service under test other than a Cluster, for one trial of
// RunTarget: nodes that faults act on, and a Locker per workload client.
type Target interface {
	// Nodes returns how many nodes faults pick from (NodeSet).
	Nodes() int
	// Locker returns workload client i's Locker, 0 ≤ i < Workload.Clients.
	Locker(client int) Locker
	// Fault applies f.Action to node now and returns the label of its band
	// on the trial's timeline. An error wrapping ErrUnsupported makes the
	// Result Skipped; any other error ends the run.
	Fault(ctx context.Context, f Fault, node int) (label string, err error)
	// Undo ends f on node: after f.For, or after f.Amount for ActionPause.
	Undo(ctx context.Context, f Fault, node int) error
	// PauseClient holds (on) or lets go (off) the traffic of a client that
	// Workload.Pause freezes: a paused process sends and reads nothing.
	PauseClient(client int, on bool)
	// Close is called when the trial's time is up, while the workload's
	// calls may still be running: it must make them return, and free what
	// the trial started. It is called once.
	Close() error
}

// RunTarget is Run on a lock service other than Redlock: newTarget starts a
// fresh Target for each trial, whose Lockers the workload's clients use.
// Faults are applied as Run applies them, through Target.Fault and
// Target.Undo. Of the Workload it uses Clients, Key, TTL, Hold, HoldOf,
// WriteEvery, Gap, AcquireTimeout, MaxAcquires, Stagger, StartOn and Pause;
// settings only Redlock clients have (Modes, Extend, ExtendLate,
// ExtendReleased, Permits) and the checks that need a Cluster (ElapsedSubtracted,
// KeysReleased) are an error wrapping redlock.ErrInvalidArgument. Each trial writes to
// the plain resource and to a new fencing.Register. The verdict is Run's;
// the Result's Backend and Clocks are empty, its Nodes is the Target's.
func RunTarget(ctx context.Context, newTarget func(ctx context.Context, w Workload) (Target, error), s Scenario, trials int, seed uint64, progress func(string)) (Result, error) {
	res := Result{Scenario: s.Name, Seed: seed, Expect: s.Expect, Why: s.Why, FencedStore: NewRegisterStore().Name()}
	w := s.Workload
	if len(w.Modes) > 0 || w.Permits > 0 || w.Extend || w.ExtendLate > 0 || w.ExtendReleased || s.ElapsedSubtracted || s.KeysReleased {
		return res, fmt.Errorf("%w: scenario %s uses settings only a Cluster's Redlock clients have", redlock.ErrInvalidArgument, s.Name)
	}
	if w.Clients < 1 {
		return res, fmt.Errorf("%w: workload needs at least one client, got %d", redlock.ErrInvalidArgument, w.Clients)
	}
	return runTrials(ctx, res, s, false, trials, seed, progress, func(res *Result, _ int, tseed uint64) (trialResult, error) {
		tr, err := runTargetTrial(ctx, newTarget, s, tseed)
		res.Nodes = max(res.Nodes, tr.nodes)
		return tr, err
	})
}

// runTargetTrial runs one trial of s on a new Target.
func runTargetTrial(ctx context.Context, newTarget func(ctx context.Context, w Workload) (Target, error), s Scenario, seed uint64) (trialResult, error) {
	t, err := newTarget(ctx, s.Workload)
	if err != nil {
		return trialResult{}, err
	}
	closeTarget := sync.OnceValue(t.Close)
	defer closeTarget()
	o := oracle.NewOracle()
	if !s.Workload.NoFencing {
		o.ExpectTokens()
	}
	o.Declare(s.Workload.Clients, t.Nodes())
	inj := &injector{target: t, nodes: t.Nodes(), oracle: o, log: faultlog.New(o), rng: rand.New(rand.NewPCG(seed, 0x5eed))}
	tctx, cancel := context.WithTimeout(ctx, s.Duration)
	defer cancel()
	// The trial's end makes the workload's calls still waiting return.
	stopClose := context.AfterFunc(tctx, func() { _ = closeTarget() })
	defer stopClose()

	triggered, err := inj.scheduleFaults(tctx, s.Faults)
	if err != nil {
		return trialResult{}, err
	}
	res := newResources()
	s.Workload.runLockers(tctx, t, o, res, seed, func(a acquisition) { inj.trigger(tctx, triggered, a) })
	cancel()
	inj.stop()
	if err := errors.Join(inj.firstErr(), res.err()); err != nil {
		return trialResult{}, err
	}
	tr := trialResult{report: o.Report(), history: o.History(), nodes: t.Nodes()}
	tr.info = tokenOrderNotes(tr.history)
	for _, h := range tr.history.Holds {
		tr.latencies = append(tr.latencies, h.Latency)
	}
	return tr, nil
}

// applyToTarget applies f to the target's node i now, records it, and
// schedules its undoing: after f.Amount for ActionPause (a band of known
// length), after f.For for the others (0: when the trial ends).
func (inj *injector) applyToTarget(ctx context.Context, f Fault, i int) error {
	now := time.Now()
	label, err := inj.target.Fault(ctx, f, i)
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return fmt.Errorf("%w: %s on node %d: %v", errUnsupported, f.Action, i, err)
		}
		return fmt.Errorf("chaos: %s on node %d: %w", f.Action, i, err)
	}
	undo := func() {
		if err := inj.target.Undo(ctx, f, i); err != nil && ctx.Err() == nil {
			inj.fail(fmt.Errorf("chaos: undo %s on node %d: %w", f.Action, i, err))
		}
	}
	if f.Action == ActionPause {
		inj.oracle.Fault(i, label, now, now.Add(f.Amount))
		inj.schedule(ctx, f.Amount, undo)
		return nil
	}
	inj.log.Open(faultlog.Band{Node: i, What: label}, now)
	if f.For > 0 {
		inj.schedule(ctx, f.For, func() {
			inj.closeBand(i, label, time.Now())
			undo()
		})
	}
	return nil
}

// runLockers runs the workload with the target's Lockers until ctx ends or
// every client is done. onAcquire is called in the acquiring client's
// goroutine before it writes.
func (w Workload) runLockers(ctx context.Context, t Target, o *oracle.Oracle, res resources, seed uint64, onAcquire func(acquisition)) {
	w.runClients(ctx, onAcquire, func(i int, fire func(acquisition)) {
		h := &lockerHolder{w: w, i: i, l: t.Locker(i), t: t, o: o, res: res, rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), fire: fire}
		h.loop(ctx)
	})
}

// lockerHolder is one workload client's loop over a Locker: acquire, write
// to both resources while it believes it holds the lock (up to its hold
// time), release.
type lockerHolder struct {
	w    Workload
	i    int
	l    Locker
	t    Target
	o    *oracle.Oracle
	res  resources
	rng  *rand.Rand
	fire func(acquisition)
}

func (h *lockerHolder) loop(ctx context.Context) {
	w := h.w
	acquireTimeout := w.AcquireTimeout
	if acquireTimeout <= 0 {
		acquireTimeout = 2 * w.TTL
	}
	for n := 1; ctx.Err() == nil && (w.MaxAcquires == 0 || n <= w.MaxAcquires); {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		start := time.Now()
		held, err := h.l.Acquire(actx, w.key(), w.TTL)
		cancel()
		latency := time.Since(start)
		if err != nil {
			if ctx.Err() == nil {
				h.o.Failed(h.i, time.Now(), latency, 1, err.Error())
				// A failure that returned at once (a refused dial) must
				// not spin.
				sleepCtx(ctx, 10*time.Millisecond)
			}
			continue
		}
		h.hold(ctx, held, n, latency)
		n++
		if w.Gap > 0 {
			sleepCtx(ctx, w.Gap+time.Duration(h.rng.Int64N(int64(w.Gap)+1)))
		}
	}
}

// hold is the client's nth hold of the lock it acquired in latency.
func (h *lockerHolder) hold(ctx context.Context, held Held, n int, latency time.Duration) {
	w, name := h.w, "client "+strconv.Itoa(h.i)
	// The holder believes it holds the lock until it releases it or learns
	// that it may have lost it (the oracle sees the latter as a release);
	// the trial's end bounds both.
	deadline, _ := ctx.Deadline()
	hold := h.o.Acquired(h.i, held.Token(), time.Now(), deadline, latency, 1)
	released := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		select {
		case <-held.Done():
			select {
			case <-released: // released first
				return
			default:
			}
			at := time.Now()
			h.o.Released(hold, at)
			h.o.Note(at, name+" learns its lock may be lost")
		case <-released:
		}
	})
	a := acquisition{Client: h.i, Nth: n}
	if g, ok := held.(interface{ Granted() []int }); ok {
		a.Granted = g.Granted()
	}
	h.fire(a)
	if p := w.Pause; p != nil && p.Client == h.i && p.Nth == n {
		// A process pause stops every goroutine, the lock's keep-alive
		// too: hold the client's traffic as well.
		h.o.Note(time.Now(), name+" paused "+p.Length.String())
		h.t.PauseClient(h.i, true)
		sleepCtx(ctx, p.Length)
		h.t.PauseClient(h.i, false)
	}
	write := func() {
		token := held.Token()
		h.o.Wrote(hold, oracle.ResourcePlain, token, h.res.writePlain(token), time.Now())
		at := time.Now()
		ok := h.res.writeFenced(token)
		h.o.WroteSpan(hold, oracle.ResourceFenced, token, ok, at, time.Now())
	}
	// The first write follows the acquisition (or the pause) without a
	// check, as a paused process resumes mid-step.
	write()
	h.work(ctx, held, write)
	select {
	case <-held.Done(): // the watcher records the end of the belief
	default:
		h.o.Released(hold, time.Now())
		close(released)
	}
	watch.Wait()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.TTL)
	_ = held.Release(rctx)
	cancel()
}

// work holds the lock for the client's hold time, stopping early when the
// holder learns it may have lost it, and writes every WriteEvery.
func (h *lockerHolder) work(ctx context.Context, held Held, write func()) {
	end := time.NewTimer(h.w.holdFor(h.i))
	defer end.Stop()
	tick := time.NewTicker(h.w.writeEvery())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-end.C:
			return
		case <-held.Done():
			return
		case <-tick.C:
			select {
			case <-held.Done():
				return
			default:
			}
			write()
		}
	}
}
