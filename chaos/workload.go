package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/mutation"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// Workload is what the clients of one trial do: each of Clients clients, with
// its own redlock.Client (as separate processes would have), repeatedly
// takes the lock on Key in its Mode, writes to the shared resources every
// WriteEvery for as long as it believes it holds the lock (up to Hold), and
// releases, until the trial ends or it made MaxAcquires acquisitions.
type Workload struct {
	Clients     int           // number of clients M (≥ 1)
	Key         string        // the lock key, default "chaos"
	TTL         time.Duration // lock TTL (> the drift allowance)
	NodeTimeout time.Duration // per-node timeout; 0 = the library's default for TTL
	Hold        time.Duration // how long a holder works, capped by what it believes it holds
	// HoldOf overrides Hold for some clients (by index).
	HoldOf map[int]time.Duration
	// WriteEvery is the time between two writes of a holder; default
	// Hold/4, at least 1 ms. Every hold writes at least once.
	WriteEvery time.Duration
	Gap        time.Duration // pause between a release and the client's next Acquire (randomised up to 2×)
	// AcquireTimeout bounds one Acquire call (its context); default 2 × TTL.
	// Do ignores it (its context is the lock's).
	AcquireTimeout time.Duration
	// RetryMax caps the delay between two attempts of one Acquire
	// (ExponentialRetry from 2 ms); default 20 ms.
	RetryMax    time.Duration
	MaxAcquires int           // per client; 0 = no limit
	Stagger     time.Duration // client i starts at i × Stagger
	// StartOn makes client i (i ≥ 1) wait for the trigger instead of
	// starting at i × Stagger.
	StartOn map[int]Trigger
	// Pause freezes one client between acquiring and writing, like a GC pause.
	Pause *Pause
	// Modes gives client i the mode Modes[i % len(Modes)]; empty means
	// every client uses ModeAcquire.
	Modes []Mode
	// Extend makes an Acquire-mode holder extend its lock once in the middle
	// of each hold, to 2 × TTL on odd holds and TTL/2 on even ones, and go on
	// trusting the new validity (shorter or longer).
	Extend bool
	// ExtendReleased makes every client, right after releasing, extend the
	// handle it just released, as a buggy caller might. That must fail; if
	// it succeeds the client believes it holds the lock again and writes.
	ExtendReleased bool
	// ExtendLate, when positive, makes an Acquire-mode holder extend its
	// lock once, to TTL, when no more than ExtendLate of its validity is
	// left, and go on only if that succeeded. With its requests delayed,
	// the extension reaches the nodes after the keys expired there and a
	// rival took them: the extend script's owner check must refuse it.
	ExtendLate time.Duration
	// DriftFactor is the clients' clock drift factor; 0 = the library's
	// default (0.01).
	DriftFactor float64
	// NoFencing runs the clients without fencing tokens: every token is 0,
	// so the fenced resource cannot tell holders apart.
	NoFencing bool
	// Quarantine turns the clients' amnesia guard on with this quarantine
	// (redlock.WithQuarantine); 0 turns it off (redlock.WithoutAmnesiaGuard,
	// although the library's default is on), so that a scenario that is not
	// about the guard does not depend on it, and the unguarded ones show
	// what it prevents.
	Quarantine time.Duration
	// Permits, when positive, makes the clients take permits of a
	// semaphore of that many permits, named by Key, instead of the lock
	// (semaphore.go).
	Permits int
	// Readers, when positive, makes the clients the readers and writers of
	// one read/write lock (redlock.RWMutex) named by Key instead of holders
	// of the lock: clients 0 to Readers−1 take read locks, the others the
	// write lock; each holds for its hold time, reading or writing the
	// resources every WriteEvery while its validity lasts (rwlock.go).
	// Pause, Gap, MaxAcquires, StartOn and Stagger apply; Modes, Permits and
	// the extensions do not.
	Readers int
}

// Mode is how a workload client takes and keeps the lock.
type Mode string

// The modes.
const (
	// ModeAcquire: Acquire, write while the handle's validity lasts
	// (Extend if Workload.Extend), Release.
	ModeAcquire Mode = "acquire"
	// ModeKeepAlive: Acquire, then Lock.KeepAlive; write while the Lease's
	// context is live; Lease.Release.
	ModeKeepAlive Mode = "keepalive"
	// ModeDo: Client.Do; inside, a reentrant Acquire on the lock-bound
	// context gives the handle (no round trip), and the holder writes while
	// that context is live.
	ModeDo Mode = "do"
)

// Pause describes a process pause (a stop-the-world GC, a VM migration) of
// one client after its Nth acquisition, before it writes to the resources
// (Kleppmann, "How to do distributed locking", fig. 1).
type Pause struct {
	Client int           // which client pauses
	Nth    int           // on its Nth acquisition (1 = first)
	Length time.Duration // how long it is frozen
}

// Trigger names an event in the workload: client Client's Nth successful
// acquisition (Nth ≥ 1).
type Trigger struct {
	Client int
	Nth    int
}

// acquisition is the event a Trigger fires on.
type acquisition struct {
	Client int
	Nth    int
	Lock   *redlock.Lock // nil for a Locker's acquisition
	// Granted are the nodes that granted a Locker's acquisition (RunTarget).
	Granted []int
}

// granted returns the nodes that granted the acquisition.
func (a acquisition) granted() []int {
	if a.Lock == nil {
		return a.Granted
	}
	var out []int
	for i, g := range a.Lock.Nodes() {
		if g.Outcome == redlock.OutcomeGranted {
			out = append(out, i)
		}
	}
	return out
}

// client is one workload client: its redlock.Client and what closes it.
type client struct {
	*redlock.Client
	close  func()
	mutant *mutation.Knobs // the mutant's knobs, for what is not in the Client (ModeExec)
}

// connect makes one redlock.Client per workload client, over addrs[i] (the
// nodes' addresses as client i reaches them), with mutant's options and
// script rewrites when mutant is not nil, and warms its connections with one
// acquire and release of a key of its own, so that the trial measures the
// lock, not the first dials (a dial must fit in the per-node timeout, and
// go-redis pauses dialing a node for a second after repeated dial failures).
// Client 0 warms up on the workload's key itself, retrying for up to 10 s
// (an error if it cannot): the key then has a history on the nodes (a
// fencing counter, and with the amnesia guard a trusted epoch on every node:
// giveHistory), as a key in production use would; the trial then deletes
// the lock key itself (not its history) on every node, so that a release
// that failed to delete it (a mutant) does not block the trial. Call it before any fault
// is applied.
func (w Workload) connect(ctx context.Context, addrs [][]string, mutant *Mutant) ([]client, error) {
	if w.Clients < 1 {
		return nil, fmt.Errorf("chaos: workload needs at least one client, got %d", w.Clients)
	}
	retryMax := w.RetryMax
	if retryMax <= 0 {
		retryMax = 20 * time.Millisecond
	}
	guard := redlock.WithoutAmnesiaGuard()
	if w.Quarantine > 0 {
		guard = redlock.WithQuarantine(w.Quarantine)
	}
	opts := []redlock.Option{redlock.WithFencing(!w.NoFencing), guard,
		redlock.WithRetry(redlock.ExponentialRetry(min(2*time.Millisecond, retryMax), retryMax, 0))}
	if w.NodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(w.NodeTimeout))
	}
	if w.DriftFactor > 0 {
		opts = append(opts, redlock.WithDriftFactor(w.DriftFactor))
	}
	var hook redis.Hook
	if mutant != nil {
		opts = append(opts, mutant.options()...)
		h, err := mutant.hook()
		if err != nil {
			return nil, err
		}
		hook = h
	}
	clients := make([]client, w.Clients)
	for i := range clients {
		c, err := dialClient(addrs[i], hook, opts)
		if err != nil {
			closeClients(clients[:i])
			return nil, err
		}
		if mutant != nil {
			c.mutant = mutant.knobs
		}
		clients[i] = c
	}
	var wg sync.WaitGroup
	var historyErr error
	for i, c := range clients {
		wg.Go(func() {
			if i == 0 {
				historyErr = w.giveHistory(ctx, c)
				return
			}
			_ = warmUp(ctx, c, fmt.Sprintf("%s:warmup:%d", w.key(), i), false)
		})
	}
	wg.Wait()
	if historyErr != nil {
		closeClients(clients)
		return nil, fmt.Errorf("chaos: the workload's key has no history on the nodes: %w", historyErr)
	}
	return clients, nil
}

// giveHistory warms client c up on the workload's key (warmUp, retrying for
// up to 20 s) and, with the amnesia guard on, repeats the warm-up until
// every node reports the key's epoch trusted. A node whose grant answered
// after the warm-up's vote (or not at all, on a loaded machine) is vouched
// for by the warm-up's Release only where it still finds the key, and the
// trial deletes the lock key right after connect: without this, that node's
// epoch could stay unvouched, its votes quarantined for the whole trial,
// and a holder that needs it would never acquire. Each successful warm-up
// vouches for the nodes that granted it, so another one heals what the
// first left.
func (w Workload) giveHistory(ctx context.Context, c client) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		if err := warmUp(ctx, c, w.key(), true); err != nil {
			// A Release that failed (say a mutant's quorum met "not held"
			// answers left by a failed attempt) warmed the nodes up all
			// the same: try again until the deadline.
			if errors.Is(err, redlock.ErrInvalidArgument) || errors.Is(err, redlock.ErrClosed) {
				return err
			}
			if sleepCtx(ctx, 20*time.Millisecond); ctx.Err() != nil {
				return err
			}
			continue
		}
		if w.Quarantine <= 0 {
			return nil
		}
		// The warm-up's stragglers vouch in the background: give them a
		// moment before looking.
		sleepCtx(ctx, 20*time.Millisecond)
		states, err := c.Inspect(ctx, w.key())
		if err != nil {
			return err
		}
		untrusted := 0
		for _, st := range states {
			if !st.Trusted {
				untrusted++
			}
		}
		if untrusted == 0 {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%d of %d nodes never vouched for the key's epoch: %w", untrusted, len(states), ctx.Err())
		}
	}
}

// warmUp acquires and releases key once, with a long per-node timeout (the
// first dials must fit in it); with retry it keeps trying until ctx ends,
// else it makes one attempt.
func warmUp(ctx context.Context, c client, key string, retry bool) error {
	opts := []redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithFencing(false)}
	acquire := c.TryAcquire
	if retry {
		acquire = c.Acquire
	}
	l, err := acquire(ctx, key, 2*time.Second, opts...)
	if err != nil {
		return err
	}
	return l.Release(context.WithoutCancel(ctx))
}

// dialClient returns a redlock client over addrs whose node connections are
// made as Cluster.Client's, with hook (if not nil) on each.
func dialClient(addrs []string, hook redis.Hook, opts []redlock.Option) (client, error) {
	conns := make([]redis.UniversalClient, len(addrs))
	closeConns := func() {
		for _, rc := range conns {
			if rc != nil {
				_ = rc.Close()
			}
		}
	}
	for i, a := range addrs {
		rc := redlock.NewNodeClient(a, func(o *redis.Options) {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = clientDialTimeout, clientIOTimeout, clientIOTimeout
			o.PoolSize = clientPoolSize
		})
		if hook != nil {
			rc.AddHook(hook)
		}
		conns[i] = rc
	}
	c, err := redlock.New(conns, opts...)
	if err != nil {
		closeConns()
		return client{}, err
	}
	return client{Client: c, close: func() {
		_ = c.Close()
		closeConns()
	}}, nil
}

func closeClients(clients []client) {
	for _, c := range clients {
		if c.close != nil {
			c.close()
		}
	}
}

func (w Workload) key() string {
	if w.Key == "" {
		return "chaos"
	}
	return w.Key
}

func (w Workload) mode(i int) Mode {
	if len(w.Modes) == 0 {
		return ModeAcquire
	}
	return w.Modes[i%len(w.Modes)]
}

func (w Workload) holdFor(i int) time.Duration {
	if h, ok := w.HoldOf[i]; ok {
		return h
	}
	return w.Hold
}

func (w Workload) writeEvery() time.Duration {
	if w.WriteEvery > 0 {
		return w.WriteEvery
	}
	return max(w.Hold/4, time.Millisecond)
}

// run runs the workload with clients (from connect) until ctx ends or every
// client is done. onAcquire is called synchronously, in the acquiring
// client's goroutine, before it writes: faults triggered by an acquisition
// are in place before the holder goes on.
// It returns what the clients saw of the library's promises.
func (w Workload) run(ctx context.Context, clients []client, o *oracle.Oracle, res resources, seed uint64, onAcquire func(acquisition)) *workloadStats {
	acquireTimeout := w.AcquireTimeout
	if acquireTimeout <= 0 {
		acquireTimeout = 2 * w.TTL
	}

	stats := &workloadStats{released: map[string]bool{}}
	w.runClients(ctx, onAcquire, func(i int, fire func(acquisition)) {
		h := &holder{w: w, i: i, c: clients[i].Client, key: w.key(), acquireTimeout: acquireTimeout, o: o, res: res,
			rng: rand.New(rand.NewPCG(seed, uint64(i)+1)), fire: fire, stats: stats, mutant: clients[i].mutant}
		h.loop(ctx)
	})
	return stats
}

// runClients runs client(i, fire) for each of the workload's clients, each
// in a goroutine of its own that starts at i × Stagger or on its StartOn
// trigger (unless ctx ends first), and returns when all have returned. A
// client calls fire on each acquisition: onAcquire, then the start of the
// clients waiting for it.
func (w Workload) runClients(ctx context.Context, onAcquire func(acquisition), client func(i int, fire func(acquisition))) {
	var (
		mu      sync.Mutex
		waiting = map[Trigger][]int{}
		started = make([]chan struct{}, w.Clients)
	)
	for i := range started {
		started[i] = make(chan struct{})
		if t, ok := w.StartOn[i]; ok && i > 0 {
			waiting[t] = append(waiting[t], i)
			continue
		}
		delay := time.Duration(i) * w.Stagger
		ch := started[i]
		if delay == 0 {
			close(ch)
			continue
		}
		t := time.AfterFunc(delay, func() { close(ch) })
		defer t.Stop()
	}
	fire := func(a acquisition) {
		onAcquire(a)
		mu.Lock()
		defer mu.Unlock()
		t := Trigger{Client: a.Client, Nth: a.Nth}
		for _, i := range waiting[t] {
			close(started[i])
		}
		delete(waiting, t)
	}
	var wg sync.WaitGroup
	for i := range w.Clients {
		wg.Go(func() {
			select {
			case <-started[i]:
			case <-ctx.Done():
				return
			}
			client(i, fire)
		})
	}
	wg.Wait()
}

// workloadStats is what the clients of a trial saw of the library's
// promises.
type workloadStats struct {
	mu       sync.Mutex
	revived  int             // extensions of released locks that succeeded
	released map[string]bool // owner values of the locks whose Release returned nil
}

func (s *workloadStats) release(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.released[owner] = true
}

func (s *workloadStats) revive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revived++
}

// holder is one workload client's loop.
type holder struct {
	w              Workload
	i              int
	c              *redlock.Client
	key            string
	acquireTimeout time.Duration
	o              *oracle.Oracle
	res            resources
	rng            *rand.Rand
	fire           func(acquisition)
	stats          *workloadStats
	mutant         *mutation.Knobs
	// refused is set when the library refused the workload's own settings
	// (ErrInvalidArgument): the client stops, since every call would.
	refused bool
	leads   int // leaderships in ModeLead (election.go)
}

func (h *holder) loop(ctx context.Context) {
	for n := 1; !h.refused && ctx.Err() == nil && (h.w.MaxAcquires == 0 || n <= h.w.MaxAcquires); {
		var ok bool
		switch h.w.mode(h.i) {
		case ModeDo:
			ok = h.holdDo(ctx, n)
		case ModeExec:
			ok = h.holdExec(ctx, n)
		case ModeElect:
			ok = h.holdElect(ctx, n)
		case ModeLead:
			ok = h.holdLead(ctx, n)
		case ModeMulti:
			ok = h.holdMulti(ctx, n) // multilock.go
		default:
			ok = h.holdLock(ctx, n)
		}
		if !ok {
			continue
		}
		n++
		if h.w.Gap > 0 {
			sleepCtx(ctx, h.w.Gap+time.Duration(h.rng.Int64N(int64(h.w.Gap)+1)))
		}
	}
}

// failed records a failed acquisition (the trial's end is not a failure).
func (h *holder) failed(ctx context.Context, err error, latency time.Duration) {
	h.refused = h.refused || errors.Is(err, redlock.ErrInvalidArgument)
	attempts := 1
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		attempts = qe.Attempts
	}
	if ctx.Err() == nil {
		h.o.Failed(h.i, time.Now(), latency, attempts, err.Error())
	}
}

// write writes to both resources.
func (h *holder) write(hold oracle.HoldID, token uint64) {
	at := time.Now()
	h.o.Wrote(hold, oracle.ResourcePlain, token, h.res.writePlain(token), at)
	at = time.Now()
	ok := h.res.writeFenced(token)
	h.o.WroteSpan(hold, oracle.ResourceFenced, token, ok, at, time.Now())
}

// pause freezes the holder if the workload's Pause names this hold, then
// writes once without looking at the clock, as a holder waking from a GC
// pause would.
func (h *holder) pause(ctx context.Context, hold oracle.HoldID, token uint64, n int) {
	if p := h.w.Pause; p != nil && p.Client == h.i && p.Nth == n {
		h.o.Note(time.Now(), "client "+strconv.Itoa(h.i)+" paused "+p.Length.String())
		sleepCtx(ctx, p.Length)
		h.write(hold, token)
	}
}

// acquire takes the lock for the client's nth hold (bounded by the acquire
// timeout), records it with the oracle and fires its trigger; ok is false
// when the lock was not acquired (the failure is recorded).
func (h *holder) acquire(ctx context.Context, n int) (lock *redlock.Lock, hold oracle.HoldID, ok bool) {
	actx, cancel := context.WithTimeout(ctx, h.acquireTimeout)
	start := time.Now()
	lock, err := h.c.Acquire(actx, h.key, h.w.TTL)
	cancel()
	latency := time.Since(start)
	if err != nil {
		h.failed(ctx, err, latency)
		return nil, 0, false
	}
	hold = h.o.Acquired(h.i, lock.Token(), lock.AcquiredAt(), lock.ValidUntil(), latency, lock.Attempts())
	h.fire(acquisition{Client: h.i, Nth: n, Lock: lock})
	return lock, hold, true
}

// holdLock is one hold in ModeAcquire or ModeKeepAlive. It reports whether
// the lock was acquired.
func (h *holder) holdLock(ctx context.Context, n int) bool {
	w := h.w
	lock, hold, ok := h.acquire(ctx, n)
	if !ok {
		return false
	}
	h.pause(ctx, hold, lock.Token(), n)

	var (
		lease *redlock.Lease
		err   error
	)
	live := func() bool { return time.Now().Before(lock.ValidUntil()) }
	if w.mode(h.i) == ModeKeepAlive {
		if lease, err = lock.KeepAlive(ctx); err != nil {
			h.o.Note(time.Now(), fmt.Sprintf("client %d: keepalive: %v", h.i, err))
			lease = nil
		} else {
			live = func() bool {
				if lease.Context().Err() != nil {
					return false
				}
				if l := lease.Lock(); l != lock {
					lock = l
					h.o.Extended(hold, l.ValidUntil())
				}
				return true
			}
		}
	}
	// A careful holder writes only while it believes it holds the lock.
	deadline := time.Now().Add(w.holdFor(h.i))
	extended := !w.Extend || lease != nil
	late := w.ExtendLate > 0 && lease == nil // an extension still to make at the end of the validity
	for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
		if !live() {
			break
		}
		if late && time.Until(lock.ValidUntil()) <= w.ExtendLate {
			late = false
			lock = h.extend(ctx, hold, lock, w.TTL)
			if !live() {
				break
			}
		}
		if !extended && time.Since(lock.AcquiredAt()) >= w.holdFor(h.i)/2 {
			extended = true
			ttl := 2 * w.TTL
			if n%2 == 0 {
				ttl = (w.TTL / 2).Round(time.Millisecond)
			}
			lock = h.extend(ctx, hold, lock, ttl)
			if !live() {
				break
			}
		}
		h.write(hold, lock.Token())
		pause := min(w.writeEvery(), time.Until(deadline))
		if late {
			pause = min(pause, time.Until(lock.ValidUntil().Add(-w.ExtendLate)))
		}
		sleepCtx(ctx, pause)
	}
	h.o.Released(hold, time.Now())
	var err2 error
	if lease != nil {
		err2 = lease.Release(context.WithoutCancel(ctx))
	} else {
		err2 = lock.Release(context.WithoutCancel(ctx))
	}
	if err2 == nil {
		h.stats.release(lock.Owner())
		if w.ExtendReleased {
			h.extendReleased(ctx, lock, n)
		}
	}
	return true
}

// extend extends lock to ttl and returns the lock to go on with: the new
// one (recorded with the oracle), or lock itself when the extension failed.
func (h *holder) extend(ctx context.Context, hold oracle.HoldID, lock *redlock.Lock, ttl time.Duration) *redlock.Lock {
	nl, err := lock.Extend(ctx, ttl)
	if err != nil {
		if !errors.Is(err, redlock.ErrNotHeld) && !errors.Is(err, redlock.ErrNoQuorum) {
			h.o.Note(time.Now(), fmt.Sprintf("client %d: extend: %v", h.i, err))
		}
		return lock
	}
	h.o.Extended(hold, nl.ValidUntil())
	return nl
}

// extendReleased extends a handle that was just released (Release returned
// nil: a majority no longer holds it), as a buggy caller would, after giving
// a rival time to take the lock. The library must refuse (the key is gone
// or someone else's); if it does not, this client believes it holds the lock
// again, and writes.
func (h *holder) extendReleased(ctx context.Context, lock *redlock.Lock, n int) {
	sleepCtx(ctx, h.w.TTL/12)
	nl, err := lock.Extend(ctx, h.w.TTL)
	if err != nil {
		return
	}
	h.stats.revive()
	h.o.Note(time.Now(), fmt.Sprintf("client %d extended a released lock", h.i))
	hold := h.o.Acquired(h.i, nl.Token(), time.Now(), nl.ValidUntil(), 0, 0)
	deadline := time.Now().Add(h.w.holdFor(h.i))
	if nl.ValidUntil().Before(deadline) {
		deadline = nl.ValidUntil()
	}
	for time.Now().Before(deadline) && ctx.Err() == nil {
		h.write(hold, nl.Token())
		sleepCtx(ctx, h.w.writeEvery())
	}
	h.o.Released(hold, time.Now())
	_ = nl.Release(context.WithoutCancel(ctx))
}

// holdDo is one hold in ModeDo. It reports whether the lock was acquired.
func (h *holder) holdDo(ctx context.Context, n int) bool {
	w := h.w
	start := time.Now()
	acquired := false
	err := h.c.Do(ctx, h.key, w.TTL, func(lctx context.Context, lease *redlock.Lease) error {
		acquired = true
		// Reentrant: the lock-bound context already holds the key, so this
		// returns a nested handle on the lease's lock without a round trip;
		// its validity follows the lease's extensions.
		lock, err := h.c.Acquire(lctx, h.key, w.TTL)
		if err != nil {
			return err
		}
		hold := h.o.Acquired(h.i, lease.Token(), lock.AcquiredAt(), lease.ValidUntil(), lock.AcquiredAt().Sub(start), 1)
		if lock.Attempts() != 0 || lock.Token() != lease.Token() || !lock.ValidUntil().Equal(lease.ValidUntil()) {
			h.o.Note(time.Now(), fmt.Sprintf("client %d: reentrant Acquire made %d attempts, token %d (lease %d), valid until %v (lease %v)",
				h.i, lock.Attempts(), lock.Token(), lease.Token(), lock.ValidUntil(), lease.ValidUntil()))
		}
		h.fire(acquisition{Client: h.i, Nth: n, Lock: lock})
		h.pause(ctx, hold, lease.Token(), n)
		deadline := time.Now().Add(w.holdFor(h.i))
		validUntil := lease.ValidUntil()
		for first := true; first || time.Now().Before(deadline); first = false {
			if lctx.Err() != nil {
				break
			}
			if v := lease.ValidUntil(); !v.Equal(validUntil) {
				validUntil = v
				h.o.Extended(hold, v)
			}
			h.write(hold, lease.Token())
			sleepCtx(ctx, min(w.writeEvery(), time.Until(deadline)))
		}
		h.o.Released(hold, time.Now())
		return nil
	})
	if !acquired {
		if err != nil {
			h.failed(ctx, err, time.Since(start))
		}
		return false
	}
	return true
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
