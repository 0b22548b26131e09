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
)

// Workload is what the clients of one trial do: each of Clients clients, with
// its own redlock.Client (as separate processes would have), repeatedly
// acquires Key, writes to the shared resources, works for Hold, and releases,
// until the trial ends or it made MaxAcquires acquisitions.
type Workload struct {
	Clients     int           // number of clients M (≥ 1)
	Key         string        // the lock key, default "chaos"
	TTL         time.Duration // lock TTL (> the drift allowance)
	NodeTimeout time.Duration // per-node timeout; 0 = the library's default for TTL
	Hold        time.Duration // work time while holding, capped at the remaining validity
	// HoldOf overrides Hold for some clients (by index).
	HoldOf map[int]time.Duration
	Gap    time.Duration // pause between a release and the client's next Acquire (randomised up to 2×)
	// AcquireTimeout bounds one Acquire call (its context); default 2 × TTL.
	AcquireTimeout time.Duration
	MaxAcquires    int           // per client; 0 = no limit
	Stagger        time.Duration // client i starts at i × Stagger
	// StartOn makes client i (i ≥ 1) wait for the trigger instead of
	// starting at i × Stagger.
	StartOn map[int]Trigger
	// Pause freezes one client between acquiring and writing, like a GC pause.
	Pause *Pause
	// NoFencing runs the clients without fencing tokens: every token is 0,
	// so the fenced resource cannot tell holders apart.
	NoFencing bool
	// Quarantine turns the clients' amnesia guard on (redlock.WithQuarantine);
	// 0 leaves it off.
	Quarantine time.Duration
}

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

// Acquisition is the event a Trigger fires on.
type Acquisition struct {
	Client int
	Nth    int
	Lock   *redlock.Lock
}

// Resources are the shared resources the clients write to: a plain one that
// accepts every write and a fenced one that checks fencing tokens.
type Resources struct {
	Plain  *PlainResource
	Fenced *FencedResource
}

// connect makes one redlock.Client per workload client and warms its
// connections with one acquire and release of a key of its own, so that the
// trial measures the lock, not the first dials (a dial must fit in the
// per-node timeout, and go-redis pauses dialing a node for a second after
// repeated dial failures). Client 0 warms up on the workload's key itself:
// the key then has a history on every node (a fencing counter, and with the
// amnesia guard a trusted epoch), as a key in production use would. Call it
// before any fault is applied.
func (w Workload) connect(ctx context.Context, cluster *Cluster) ([]*redlock.Client, error) {
	if w.Clients < 1 {
		return nil, fmt.Errorf("chaos: workload needs at least one client, got %d", w.Clients)
	}
	opts := []redlock.Option{redlock.WithFencing(!w.NoFencing), redlock.WithQuarantine(w.Quarantine),
		redlock.WithRetry(redlock.ExponentialRetry(2*time.Millisecond, 20*time.Millisecond, 0))}
	if w.NodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(w.NodeTimeout))
	}
	clients := make([]*redlock.Client, w.Clients)
	for i := range clients {
		c, err := cluster.Client(opts...)
		if err != nil {
			closeClients(clients[:i])
			return nil, err
		}
		clients[i] = c
	}
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			key := fmt.Sprintf("%s:warmup:%d", w.key(), i)
			if i == 0 {
				key = w.key()
			}
			if l, err := c.TryAcquire(ctx, key, 2*time.Second, redlock.WithNodeTimeout(time.Second), redlock.WithFencing(false)); err == nil {
				_ = l.Release(ctx)
			}
		})
	}
	wg.Wait()
	return clients, nil
}

func closeClients(clients []*redlock.Client) {
	for _, c := range clients {
		if c != nil {
			_ = c.Close()
		}
	}
}

func (w Workload) key() string {
	if w.Key == "" {
		return "chaos"
	}
	return w.Key
}

// run runs the workload with clients (from connect) until ctx ends or every
// client is done. onAcquire is called synchronously, in the acquiring
// client's goroutine, before it writes: faults triggered by an acquisition
// are in place before the holder goes on.
func (w Workload) run(ctx context.Context, clients []*redlock.Client, o *Oracle, res Resources, seed uint64, onAcquire func(Acquisition)) {
	key := w.key()
	acquireTimeout := w.AcquireTimeout
	if acquireTimeout <= 0 {
		acquireTimeout = 2 * w.TTL
	}

	// started[i] is closed when client i may start.
	var (
		mu      sync.Mutex
		started = make([]chan struct{}, w.Clients)
		waiting = map[Trigger][]int{}
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
	fire := func(a Acquisition) {
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
	for i, c := range clients {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		wg.Go(func() {
			select {
			case <-started[i]:
			case <-ctx.Done():
				return
			}
			w.client(ctx, i, c, key, acquireTimeout, o, res, rng, fire)
		})
	}
	wg.Wait()
}

// client is one client's loop.
func (w Workload) client(ctx context.Context, i int, c *redlock.Client, key string, acquireTimeout time.Duration,
	o *Oracle, res Resources, rng *rand.Rand, fire func(Acquisition)) {
	for n := 1; ctx.Err() == nil && (w.MaxAcquires == 0 || n <= w.MaxAcquires); {
		actx, cancel := context.WithTimeout(ctx, acquireTimeout)
		start := time.Now()
		lock, err := c.Acquire(actx, key, w.TTL)
		cancel()
		latency := time.Since(start)
		if err != nil {
			attempts := 1
			var qe *redlock.QuorumError
			if errors.As(err, &qe) {
				attempts = qe.Attempts
			}
			if ctx.Err() == nil { // the trial's end is not a failure
				o.Failed(i, time.Now(), latency, attempts, err.Error())
			}
			continue
		}
		hold := o.Acquired(i, lock.Token(), lock.AcquiredAt(), lock.ValidUntil(), latency, lock.Attempts())
		fire(Acquisition{Client: i, Nth: n, Lock: lock})

		if p := w.Pause; p != nil && p.Client == i && p.Nth == n {
			o.Note(time.Now(), "client "+strconv.Itoa(i)+" paused "+p.Length.String())
			sleepCtx(ctx, p.Length)
		}
		value := fmt.Sprintf("client %d hold %d", i, n)
		at := time.Now()
		o.Wrote(hold, "plain", lock.Token(), res.Plain.Write(lock.Token(), value), at)
		at = time.Now()
		o.Wrote(hold, "fenced", lock.Token(), res.Fenced.Write(lock.Token(), value), at)

		// A careful holder works only while the lock is valid.
		holdFor := w.Hold
		if h, ok := w.HoldOf[i]; ok {
			holdFor = h
		}
		if work := min(holdFor, lock.Validity()-time.Millisecond); work > 0 {
			sleepCtx(ctx, work)
		}
		o.Released(hold, time.Now())
		_ = lock.Release(context.WithoutCancel(ctx))
		n++
		if w.Gap > 0 {
			sleepCtx(ctx, w.Gap+time.Duration(rng.Int64N(int64(w.Gap)+1)))
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
