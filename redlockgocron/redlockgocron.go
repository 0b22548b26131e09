// Package redlockgocron runs go-co-op/gocron v2 jobs on several replicas
// under a redlock lock: a [gocron.Locker] that runs each tick of a job on one
// replica, and a [gocron.Elector] that runs every job on one leader. It is a
// module of its own, so that the redlock library does not depend on gocron.
//
// The Locker takes a job's lock at each tick, keeps it alive while the job
// runs (a job longer than the TTL, or than its interval, never runs twice
// at once; the ticks that fire meanwhile are skipped), and on Unlock leaves
// it taken until a minimum hold after the grant (redlock.WithMinHold): half
// the job's interval by default. A replica whose tick fires later than the
// first one's (clock skew, start-up delay) then finds the tick taken instead
// of running a short job again. The skew tolerated is the smaller of the
// hold and the interval minus the hold: half the interval by default. The
// job reads its fencing token from Locker.Lease.
package redlockgocron

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/d3b93e30/redlock"
)

// DefaultTTL is the lock TTL of a Locker and an Elector unless WithTTL sets
// another: how long a lock outlives a replica that crashed while holding it.
const DefaultTTL = 10 * time.Second

// DefaultKeyPrefix is put in front of job names (and of the Elector's
// "leader") to make the lock keys, unless WithKeyPrefix sets another.
const DefaultKeyPrefix = "gocron:"

// ErrNotLeader is what Elector.IsLeader returns when this replica is not the
// leader; it wraps the reason (test with errors.Is, e.g. redlock.ErrTaken:
// another replica leads).
var ErrNotLeader = errors.New("redlockgocron: not the leader")

// Option configures a Locker or an Elector. An option given a bad value makes
// NewLocker or NewElector return an error wrapping redlock.ErrInvalidArgument.
type Option func(*config) error

type config struct {
	ttl      time.Duration
	prefix   string
	minHold  time.Duration
	holdSet  bool // WithMinHold was given
	lockOpts []redlock.Option
	holdOpts []redlock.HoldOption
}

func newConfig(client *redlock.Client, opts []Option) (config, error) {
	cfg := config{ttl: DefaultTTL, prefix: DefaultKeyPrefix}
	if client == nil {
		return cfg, fmt.Errorf("%w: redlockgocron: nil client", redlock.ErrInvalidArgument)
	}
	for _, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("%w: redlockgocron: nil option", redlock.ErrInvalidArgument)
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// WithTTL sets the lock's TTL (default DefaultTTL): a whole number of
// milliseconds, at least 1 ms. The lock is extended every third of it while
// the job runs (or the replica leads), so it is also how long a replica
// that crashed keeps the lock. The Locker uses the minimum hold plus a
// quarter and 50 ms instead when that is longer (room for the drift
// allowance, so that the hold is kept in full).
func WithTTL(d time.Duration) Option {
	return func(c *config) error {
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return fmt.Errorf("%w: redlockgocron: ttl %v must be a positive whole number of milliseconds", redlock.ErrInvalidArgument, d)
		}
		c.ttl = d
		return nil
	}
}

// WithMinHold sets the Locker's minimum hold for every job: each lock stays
// taken until d after it was acquired, even when the job ended sooner (see
// redlock.WithMinHold). Without it the hold is half the job's interval,
// which needs Locker.Attach. 0 releases when the job ends, as
// gocron-redis-lock does. d must not be negative; NewElector refuses it.
func WithMinHold(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return fmt.Errorf("%w: redlockgocron: minimum hold %v must not be negative", redlock.ErrInvalidArgument, d)
		}
		c.minHold, c.holdSet = d, true
		return nil
	}
}

// WithKeyPrefix sets what is put in front of the job's name (or "leader",
// for the Elector) to make the lock key (default DefaultKeyPrefix). Use one
// prefix per group of replicas that run the same jobs.
func WithKeyPrefix(p string) Option {
	return func(c *config) error {
		c.prefix = p
		return nil
	}
}

// WithLockOptions adds redlock options to every acquisition and its Lease's
// extensions: e.g. redlock.WithNodeTimeout (the Lease's own options are
// WithHoldOptions). Each attempt
// is one (redlock.NoRetry; the Locker and the Elector retry themselves, see
// Locker): a redlock.WithRetry here would wait for a busy lock and run the
// tick again once the hold ends. The Locker's minimum hold overrides a
// redlock.WithMinHold.
func WithLockOptions(opts ...redlock.Option) Option {
	return func(c *config) error {
		c.lockOpts = append(c.lockOpts, opts...)
		return nil
	}
}

// WithHoldOptions adds redlock options to every Lease that keeps a lock:
// e.g. redlock.WithExtendInterval. A nil one makes NewLocker and NewElector
// return an error wrapping redlock.ErrInvalidArgument; one with a bad value,
// Lock and IsLeader.
func WithHoldOptions(opts ...redlock.HoldOption) Option {
	return func(c *config) error {
		for _, o := range opts {
			if o == nil {
				return fmt.Errorf("%w: redlockgocron: nil hold option", redlock.ErrInvalidArgument)
			}
		}
		c.holdOpts = append(c.holdOpts, opts...)
		return nil
	}
}

// acquire takes key and keeps it alive until the returned Lease is
// released. It makes one attempt, and more until window has passed while no
// owner holds the key on a majority of the nodes: after a split vote between
// replicas whose ticks fired together (each took some nodes, none a
// majority), or with nodes too slow to answer in time. ctx bounds the
// acquisition only: the Lease lives on until it is released or the lock is
// lost.
func (c config) acquire(ctx context.Context, client *redlock.Client, key string, ttl, window time.Duration, extra ...redlock.Option) (*redlock.Lease, error) {
	opts := slices.Concat([]redlock.Option{redlock.WithRetry(redlock.NoRetry())}, c.lockOpts, extra)
	deadline := time.Now().Add(window)
	backoff := redlock.DefaultRetry()
	for attempt := 1; ; attempt++ {
		lock, err := client.Acquire(ctx, key, ttl, opts...)
		if err == nil {
			lease, err := lock.KeepAlive(context.WithoutCancel(ctx), c.holdOpts...)
			if err != nil {
				_ = lock.Release(context.WithoutCancel(ctx))
				return nil, err
			}
			return lease, nil
		}
		if !time.Now().Before(deadline) || !errors.Is(err, redlock.ErrNotAcquired) || ctx.Err() != nil || held(ctx, client, key) {
			return nil, err
		}
		delay, _ := backoff.NextRetry(attempt) // DefaultRetry never gives up
		t := time.NewTimer(min(delay, time.Until(deadline)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
	}
}

// held reports whether one owner holds key on a majority of the nodes, as
// Client.Inspect reads them: another replica holds the lock, and retrying
// is of no use. Keys of different owners are the remains of a split vote,
// which their attempts are deleting.
func held(ctx context.Context, client *redlock.Client, key string) bool {
	states, err := client.Inspect(ctx, key)
	if err != nil {
		return false
	}
	owners := make(map[string]int)
	for _, s := range states {
		if s.Err == nil && s.Held {
			owners[s.Owner]++
			if owners[s.Owner] >= client.Quorum() {
				return true
			}
		}
	}
	return false
}

// Locker is a gocron.Locker over a redlock.Client: pass it to
// gocron.WithDistributedLocker (or WithDistributedJobLocker) on every
// replica. Lock takes the job's lock, prefix + job name, and fails at once
// when another replica holds it (gocron then skips the tick). After a
// failed attempt in which no owner held the key on a majority of the nodes
// (a split vote between replicas whose ticks fired together, or slow
// nodes) it tries again, for a quarter of the hold at most. The lock is
// kept alive until gocron calls Unlock after the job, which leaves it taken
// until the minimum hold has passed and returns at once. Its methods are
// safe for concurrent use.
type Locker struct {
	client *redlock.Client
	cfg    config

	mu    sync.Mutex
	sched gocron.Scheduler
	held  map[string]*redlock.Lease // by job name
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker over client. Without WithMinHold, call Attach
// with the scheduler before it starts: each job's hold is then half its
// interval. Errors wrap redlock.ErrInvalidArgument: a nil client or option,
// or an option's bad value.
func NewLocker(client *redlock.Client, opts ...Option) (*Locker, error) {
	cfg, err := newConfig(client, opts)
	if err != nil {
		return nil, err
	}
	return &Locker{client: client, cfg: cfg, held: make(map[string]*redlock.Lease)}, nil
}

// maxDerivedHold caps the minimum hold Attach derives from a job's interval:
// a skew between replicas of more than a few minutes is a fault, and a
// longer hold would only keep a crashed replica's lock longer.
const maxDerivedHold = 5 * time.Minute

// Attach gives the Locker the scheduler whose jobs it locks, so that each
// job's minimum hold is half its interval, at most 5 minutes: half the
// shortest gap between its next three runs (Job.NextRuns), read at every
// tick, which fits duration, cron and daily jobs alike. A job with no next
// run (a one-time job) holds its lock for the TTL. WithMinHold, when given,
// wins.
func (l *Locker) Attach(s gocron.Scheduler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sched = s
}

// Lock takes the lock of the named job for one tick; gocron calls it. It
// returns an error wrapping redlock.ErrNotAcquired (and redlock.ErrTaken when
// another replica holds it) when the lock was not taken, and one wrapping
// redlock.ErrInvalidArgument when the job has no minimum hold (neither
// WithMinHold nor Attach) or a lock option is bad.
func (l *Locker) Lock(ctx context.Context, job string) (gocron.Lock, error) {
	hold, err := l.holdFor(job)
	if err != nil {
		return nil, err
	}
	lease, err := l.cfg.acquire(ctx, l.client, l.cfg.prefix+job, ttlFor(l.cfg.ttl, hold), hold/4, redlock.WithMinHold(hold))
	if err != nil {
		return nil, fmt.Errorf("redlockgocron: job %q: %w", job, err)
	}
	l.mu.Lock()
	l.held[job] = lease
	l.mu.Unlock()
	return &jobLock{l: l, job: job, lease: lease}, nil
}

// Lease returns the Lease of the named job's lock while this replica runs
// the job (between Lock and Unlock), else nil. The job reads its fencing
// token from it, Lease(name).Lock().Token(), to pass to the storage it
// writes, and can stop when the lock is lost (Lease(name).Done()).
func (l *Locker) Lease(job string) *redlock.Lease {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[job]
}

// holdFor returns the minimum hold of the named job's lock.
func (l *Locker) holdFor(job string) (time.Duration, error) {
	if l.cfg.holdSet {
		return l.cfg.minHold, nil
	}
	l.mu.Lock()
	s := l.sched
	l.mu.Unlock()
	if s == nil {
		return 0, fmt.Errorf("%w: redlockgocron: job %q has no minimum hold: call Locker.Attach with the scheduler (the hold is then half the job's interval) or give WithMinHold", redlock.ErrInvalidArgument, job)
	}
	var period time.Duration
	for _, j := range s.Jobs() {
		if j.Name() != job {
			continue
		}
		runs, err := j.NextRuns(3)
		if err != nil {
			continue
		}
		for i := 1; i < len(runs); i++ {
			if runs[i-1].IsZero() || runs[i].IsZero() { // past a one-time job's last run
				continue
			}
			if gap := runs[i].Sub(runs[i-1]); gap > 0 && (period == 0 || gap < period) {
				period = gap
			}
		}
	}
	if period == 0 {
		return l.cfg.ttl, nil
	}
	return min(period/2, maxDerivedHold).Truncate(time.Millisecond), nil
}

// ttlFor returns the TTL of a lock with the given minimum hold: ttl, or
// the hold plus a quarter and 50 ms when that is longer. The hold ends at the
// latest at the lock's validity, which the drift allowance (1% and 2 ms by
// default) and the acquisition's own time shorten: this leaves room for them.
func ttlFor(ttl, hold time.Duration) time.Duration {
	return max(ttl, (hold + hold/4 + 50*time.Millisecond).Truncate(time.Millisecond))
}

// jobLock is one tick's lock, as gocron holds it.
type jobLock struct {
	l     *Locker
	job   string
	lease *redlock.Lease
}

// Unlock releases the tick's lock, leaving it taken until the minimum hold
// has passed, without waiting for that. It reports a lock lost while the
// job ran (redlock.ErrLockLost) and the release's error (gocron ignores
// both); later calls return the first call's.
func (k *jobLock) Unlock(ctx context.Context) error {
	k.l.mu.Lock()
	if k.l.held[k.job] == k.lease {
		delete(k.l.held, k.job)
	}
	k.l.mu.Unlock()
	err := k.lease.Release(ctx)
	if lost := k.lease.Err(); errors.Is(lost, redlock.ErrLockLost) {
		err = errors.Join(lost, err)
	}
	if err != nil {
		return fmt.Errorf("redlockgocron: job %q: %w", k.job, err)
	}
	return nil
}

// Elector is a gocron.Elector over a redlock.Client: pass it to
// gocron.WithDistributedElector on every replica, and only the replica that
// holds the lock prefix + "leader" runs jobs. Leadership is taken at the
// first IsLeader call that finds the lock free (retrying a split vote, as
// the Locker, for a tenth of the TTL at most), then kept alive in the
// background until it is lost or Close gives it up; another replica takes
// over at its first tick after that (within the TTL when the leader
// crashed). A tick may run twice, or not at all, around a change of leader;
// a job longer than its interval overlaps itself on the leader unless it
// has gocron.WithSingletonMode. Its methods are safe for concurrent use.
type Elector struct {
	client *redlock.Client
	cfg    config

	mu     sync.Mutex
	lease  *redlock.Lease // nil while not the leader
	closed bool
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector over client. Errors wrap
// redlock.ErrInvalidArgument: a nil client or option, an option's bad value,
// or WithMinHold (a Locker's option).
func NewElector(client *redlock.Client, opts ...Option) (*Elector, error) {
	cfg, err := newConfig(client, opts)
	if err != nil {
		return nil, err
	}
	if cfg.holdSet {
		return nil, fmt.Errorf("%w: redlockgocron: WithMinHold applies to a Locker, not an Elector", redlock.ErrInvalidArgument)
	}
	return &Elector{client: client, cfg: cfg}, nil
}

// IsLeader returns nil when this replica leads, taking the leadership with
// one attempt if it is free; gocron calls it before each run. Otherwise it
// returns an error wrapping ErrNotLeader and why: the acquisition's error
// (redlock.ErrTaken: another replica leads), or that Close was called. A
// leadership found lost is given up, and taken again if the lock is free.
func (e *Elector) IsLeader(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: the elector is closed", ErrNotLeader)
	}
	if e.lease != nil {
		if e.lease.Err() == nil && e.lease.Lock().Validity() > 0 {
			return nil
		}
		_ = e.lease.Release(context.WithoutCancel(ctx)) // lost: what is left of it
		e.lease = nil
	}
	lease, err := e.cfg.acquire(ctx, e.client, e.cfg.prefix+"leader", e.cfg.ttl, e.cfg.ttl/10)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	e.lease = lease
	return nil
}

// Lease returns the Lease of the leadership while this replica leads, else
// nil. A job reads the leader's fencing token from it,
// Lease().Lock().Token(): it is the same for the whole term and greater than
// every earlier leader's. Lease().Done() is closed when the leadership is
// lost.
func (e *Elector) Lease() *redlock.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease == nil || e.lease.Err() != nil {
		return nil
	}
	return e.lease
}

// Close gives up the leadership, if held, and stops keeping it alive: call
// it after gocron's Scheduler.Shutdown, so that another replica takes over
// at its next tick. IsLeader fails from then on. It returns the release's
// error (ctx as in redlock.Lock.Release); later calls return nil.
func (e *Elector) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.closed = true
	if e.lease == nil {
		return nil
	}
	err := e.lease.Release(ctx)
	e.lease = nil
	return err
}
