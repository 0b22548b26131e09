package etcdcompare

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/d3b93e30/redlock/chaos"
)

// ErrSessionLost reports that the session an acquisition would have used
// ended (its lease expired or could not be renewed) before the lock was held.
var ErrSessionLost = errors.New("etcdcompare: session lost")

// EtcdLocker locks keys with etcd's concurrency.Mutex over one
// concurrency.Session, as a long-running client process would: the session
// (a lease kept alive in the background at TTL/3) is created on the first
// Acquire and reused while it lives; once its Done channel closes, the next
// Acquire grants a new lease. Every lock of the Locker lives on that lease, so
// losing it loses them all.
//
// The fencing token is the create revision of the mutex's own key: etcd's
// mutex grants the lock to the waiter whose key has the lowest create
// revision, so successive holders' tokens strictly increase (Kleppmann's
// fencing, with the revision as the token).
//
// An EtcdLocker is safe for concurrent use; Close ends its session.
type EtcdLocker struct {
	cli    *clientv3.Client
	prefix string

	mu      sync.Mutex
	ctx     context.Context // sessions' lifetime
	cancel  context.CancelFunc
	session *concurrency.Session
	ttl     int
	closed  bool
}

// NewEtcdLocker returns a Locker that locks "prefix/KEY" through cli. cli
// stays the caller's to close, after the Locker.
func NewEtcdLocker(cli *clientv3.Client, prefix string) *EtcdLocker {
	ctx, cancel := context.WithCancel(context.Background())
	return &EtcdLocker{cli: cli, prefix: prefix, ctx: ctx, cancel: cancel}
}

// ttlSeconds converts a TTL to etcd's whole seconds. It returns
// ErrInvalidArgument unless ttl is a positive whole number of seconds.
func ttlSeconds(ttl time.Duration) (int, error) {
	if ttl <= 0 || ttl%time.Second != 0 || ttl/time.Second > math.MaxInt32 {
		return 0, fmt.Errorf("%w: etcd lease TTL %v is not a positive whole number of seconds", ErrInvalidArgument, ttl)
	}
	return int(ttl / time.Second), nil
}

// sessionFor returns a live session with the given TTL, granting a new lease
// under ctx when there is none. Granting the lease ourselves keeps a
// partitioned or killed member from blocking past ctx.
func (l *EtcdLocker) sessionFor(ctx context.Context, ttl int) (*concurrency.Session, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, fmt.Errorf("%w: locker closed", ErrInvalidArgument)
	}
	if s := l.session; s != nil && l.ttl == ttl {
		select {
		case <-s.Done():
		default:
			l.mu.Unlock()
			return s, nil
		}
	}
	old := l.session
	l.session = nil
	l.mu.Unlock()
	if old != nil {
		old.Orphan()
	}

	lease, err := l.cli.Grant(ctx, int64(ttl))
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(l.cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(ttl), concurrency.WithContext(l.ctx))
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		s.Orphan()
		return nil, fmt.Errorf("%w: locker closed", ErrInvalidArgument)
	}
	l.session, l.ttl = s, ttl
	return s, nil
}

// Acquire implements chaos.Locker: it blocks in concurrency.Mutex.Lock until the
// lock on key is held, then reads the key's create revision as the token
// (one more round trip). ttl must be a whole number of seconds (etcd leases
// are), else ErrInvalidArgument. A failure is ctx's error
// (errors.Is(err, context.DeadlineExceeded)), ErrSessionLost, or the
// client's error; a failed Acquire leaves no key behind when etcd can be
// reached to delete it (concurrency.Mutex's own clean-up).
func (l *EtcdLocker) Acquire(ctx context.Context, key string, ttl time.Duration) (chaos.Held, error) {
	secs, err := ttlSeconds(ttl)
	if err != nil {
		return nil, err
	}
	s, err := l.sessionFor(ctx, secs)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(s, l.prefix+"/"+key)
	if err := m.Lock(ctx); err != nil {
		if errors.Is(err, concurrency.ErrSessionExpired) {
			return nil, fmt.Errorf("%w: %v", ErrSessionLost, err)
		}
		return nil, err
	}
	resp, err := l.cli.Get(ctx, m.Key())
	if err == nil && len(resp.Kvs) == 0 {
		err = fmt.Errorf("%w: lock key %s gone after Lock", ErrSessionLost, m.Key())
	}
	if err != nil {
		// Do not leave the key to block others until the lease expires.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
		_ = m.Unlock(uctx)
		cancel()
		return nil, err
	}
	return &etcdHeld{m: m, s: s, token: uint64(resp.Kvs[0].CreateRevision)}, nil
}

// Close ends the current session, revoking its lease (bounded by the TTL),
// so every lock it holds is released. Later Acquire calls fail.
func (l *EtcdLocker) Close() error {
	l.mu.Lock()
	s := l.session
	l.session, l.closed = nil, true
	l.mu.Unlock()
	var err error
	if s != nil {
		err = s.Close()
	}
	l.cancel()
	return err
}

// etcdHeld is one held etcd mutex.
type etcdHeld struct {
	m     *concurrency.Mutex
	s     *concurrency.Session
	token uint64
}

func (h *etcdHeld) Token() uint64         { return h.token }
func (h *etcdHeld) Done() <-chan struct{} { return h.s.Done() }

// Release deletes the mutex key (concurrency.Mutex.Unlock). The session stays
// for the next acquisition.
func (h *etcdHeld) Release(ctx context.Context) error { return h.m.Unlock(ctx) }
