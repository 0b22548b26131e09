// Package dailyreport is the users' first use case, kept working as an
// example and a test.
//
// Five worker pods generate a daily PDF report per client. Two pods must never
// build the same client's report at once, and a pod that crashes while
// building one must not block that report forever. Each pod tries every
// client's report: the first pod to lock it builds it, the others find it
// busy and move on, and a lock left behind by a crashed pod expires after
// TTL.
//
// BuildReport is the worker we recommend, on N independent Redis nodes (a
// Redlock, which survives the loss of a minority of them): the report is
// built under redlock.Client.Do, so the lock is extended while it builds and
// the build's context ends the moment the lock is lost; the report goes to a
// Store with the lock's fencing token, and the Store refuses a token lower
// than one it has seen, so a pod that paused past its lock cannot overwrite
// the next pod's report. A busy report is the library's redlock.ErrTaken.
//
// PerformLockedWork is the simple version on one Redis node: one TTL, no
// extension, no fencing. Work must finish well within TTL.
//
// The lock makes "check whether the report exists, then build it" atomic
// across pods; it does not by itself make a report get built once per day.
// BuildReport starts by asking the Store whether another pod already built
// the report.
package dailyreport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
)

// TTL is how long a report's lock lives on the nodes. A pod that crashes while
// holding the lock blocks that report for at most this long. BuildReport
// extends the lock (every TTL/3) while the report builds; PerformLockedWork
// does not, and returns an error when work outlasted it.
const TTL = 15 * time.Second

// Attempts is how many times BuildReport tries to take a report's lock
// before it reports the report busy: the first attempt of pods that start
// together fails only when none of them won a majority of the nodes, and
// a second one, at a jittered delay, settles that; the third is a margin.
const Attempts = 3

// ErrResourceLocked means another owner holds the report's lock: the work did
// not run. A worker that gets it moves on to the next report. The error also
// wraps the library's *redlock.QuorumError, so errors.Is(err,
// redlock.ErrTaken) and errors.Is(err, redlock.ErrNotAcquired) hold and
// errors.As reaches the per-node outcomes.
var ErrResourceLocked = errors.New("dailyreport: resource is locked")

// LockKey returns the lock key of clientID's report: "lock:report:{clientID}".
// The braces are literal: a Redis Cluster hash tag, so every key of one client
// lands in the same slot.
func LockKey(clientID string) string {
	return "lock:report:{" + clientID + "}"
}

// Store keeps the reports of one day in Redis, each with the fencing token of
// the lock it was built under, written by fencing.SetIfNewer: a report whose
// token is lower than the stored one is refused (fencing.ErrStale), so a pod
// whose lock passed to another while it paused cannot overwrite the newer
// pod's report. Its Redis is the report store, not one of the lock's nodes;
// its keys must not expire or be evicted (see fencing.SetIfNewer). A Store is
// safe for concurrent use.
type Store struct {
	rdb redis.Scripter
	day string
}

// NewStore returns the Store of day's reports (any label, such as
// "2025-06-01") on rdb. rdb stays the caller's.
func NewStore(rdb redis.Scripter, day string) *Store {
	return &Store{rdb: rdb, day: day}
}

// ReportKey returns the Redis key of clientID's report:
// "report:{clientID}:day", a hash written by fencing.SetIfNewer.
func (s *Store) ReportKey(clientID string) string {
	return "report:{" + clientID + "}:" + s.day
}

// Save stores report as clientID's report, written under a lock with fencing
// token token. It returns an error matching fencing.ErrStale (a
// *fencing.StaleError) when the stored report came with a higher token, and
// Redis errors wrapped.
func (s *Store) Save(ctx context.Context, clientID string, token uint64, report []byte) error {
	return fencing.SetIfNewer(ctx, s.rdb, s.ReportKey(clientID), token, string(report))
}

// Load returns clientID's report and the fencing token it was saved with;
// redis.Nil when there is none.
func (s *Store) Load(ctx context.Context, clientID string) (report []byte, token uint64, err error) {
	v, token, err := fencing.GetWithToken(ctx, s.rdb, s.ReportKey(clientID))
	if err != nil {
		return nil, 0, err
	}
	return []byte(v), token, nil
}

// BuildReport builds clientID's report under its lock (LockKey, TTL) on the
// nodes of locks, the way we recommend, and reports whether this call saved
// it:
//
//   - A few attempts (Attempts, with jittered delays up to 100 ms): pods
//     that start at the same moment split a vote now and then (one of them
//     wins when its grants are a majority, on a key's first use too; when
//     none is, they all fail once). When another pod still holds the lock
//     after them it returns an error matching redlock.ErrTaken (and
//     ErrResourceLocked), without building.
//   - Under the lock it asks store first: a report already there (another
//     pod built it since this one looked) is not built again (false, nil).
//   - build runs under locks.Do: the lock is extended every TTL/3 while it
//     runs, and build's ctx ends the moment the lock can no longer be
//     trusted (context.Cause(ctx) says why). build must then stop; what it
//     returns afterwards is not saved, and the error wraps
//     redlock.ErrLockLost.
//   - The report is saved with the lock's fencing token: if a later holder
//     has saved one (this pod paused past its lock), the error matches
//     fencing.ErrStale and the newer report stays. A lock lost during the
//     save gives (true, an error wrapping redlock.ErrLockLost): the report
//     was accepted, and a later holder's, with a higher token, replaces it.
//
// Other errors: redlock.ErrInvalidArgument (wrapped) for a nil ctx, locks,
// store or build, or an empty clientID; the lock's other failures (too few
// nodes: redlock.ErrNotAcquired without ErrTaken), build's error, the store's.
// opts go to Do after the retry policy (redlock.WithExtendInterval, say).
// locks is not closed.
func BuildReport(ctx context.Context, locks *redlock.Client, store *Store, clientID string, build func(ctx context.Context) ([]byte, error), opts ...redlock.DoOption) (built bool, err error) {
	switch {
	case locks == nil:
		return false, fmt.Errorf("dailyreport: nil redlock client: %w", redlock.ErrInvalidArgument)
	case store == nil:
		return false, fmt.Errorf("dailyreport: nil store: %w", redlock.ErrInvalidArgument)
	case build == nil:
		return false, fmt.Errorf("dailyreport: nil build for client %q: %w", clientID, redlock.ErrInvalidArgument)
	}
	if err := validate(ctx, clientID); err != nil {
		return false, err
	}
	err = locks.Do(ctx, LockKey(clientID), TTL, func(ctx context.Context, lease *redlock.Lease) error {
		switch _, _, err := store.Load(ctx, clientID); {
		case err == nil:
			return nil // built by another pod meanwhile
		case !errors.Is(err, redis.Nil):
			return err
		}
		report, err := build(ctx)
		if err != nil {
			return err
		}
		// A build that ignored its context may return after the lock was
		// lost: its report is not saved. The store's token check covers
		// the pause that could still come between this check and the write.
		if lease.Validity() <= 0 {
			return fmt.Errorf("report built after the lock ended: %w", lease.Err())
		}
		if err := store.Save(ctx, clientID, lease.Token(), report); err != nil {
			return err
		}
		built = true
		return nil
	}, append([]redlock.DoOption{redlock.WithRetry(redlock.ExponentialRetry(10*time.Millisecond, 100*time.Millisecond, Attempts))}, opts...)...)
	switch {
	case err == nil:
		return built, nil
	case errors.Is(err, redlock.ErrTaken):
		return false, fmt.Errorf("%w: report %q: %w", ErrResourceLocked, clientID, err)
	}
	return built, fmt.Errorf("dailyreport: report %q: %w", clientID, err)
}

// PerformLockedWork runs work while holding the lock on clientID's report on
// the single Redis node rdb (a one-node Redlock), and releases it afterwards.
// It is the simple version of BuildReport: the lock is not extended, so work
// must finish well within TTL, and work gets no fencing token.
//
// It makes one attempt: when another owner holds the lock it returns an
// error matching ErrResourceLocked (and redlock.ErrTaken) at once, without
// running work. Otherwise it sets LockKey(clientID) with a random owner value
// and a TTL of TTL, runs work, and deletes the key only if it still holds its
// owner value (an owner-checked script). The release also happens when work
// panics; the panic then continues with its original value.
//
// Errors: redlock.ErrInvalidArgument (wrapped) for a nil ctx, a nil rdb, an
// empty clientID or a nil work; ErrResourceLocked when the report is locked;
// other *redlock.QuorumError failures (node unreachable, timed out, context
// ended) wrapped as they are. An error after work ran says so, and wraps
// redlock.ErrNotHeld (work outlasted the lock: another pod may have built the
// report at the same time) or redlock.ErrNoQuorum (the release did not reach
// the node; the key expires after TTL).
//
// rdb stays the caller's and is not closed. Clients made by
// redlock.NewNodeClient have the settings Redlock wants; with other clients
// a hung node may delay the return until rdb's ReadTimeout.
func PerformLockedWork(ctx context.Context, rdb *redis.Client, clientID string, work func()) error {
	if rdb == nil {
		return fmt.Errorf("dailyreport: nil redis client: %w", redlock.ErrInvalidArgument)
	}
	if err := validate(ctx, clientID); err != nil {
		return err
	}
	if work == nil {
		return fmt.Errorf("dailyreport: nil work for client %q: %w", clientID, redlock.ErrInvalidArgument)
	}
	// A Client over a caller's redis.Client opens nothing; Close only waits
	// for node calls still in flight and leaves rdb open.
	c, err := redlock.New([]redis.UniversalClient{rdb})
	if err != nil {
		return fmt.Errorf("dailyreport: %w", err)
	}
	defer c.Close()
	return perform(ctx, c, clientID, work)
}

func validate(ctx context.Context, clientID string) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("dailyreport: nil context: %w", redlock.ErrInvalidArgument)
	case clientID == "":
		return fmt.Errorf("dailyreport: empty client id: %w", redlock.ErrInvalidArgument)
	}
	return nil
}

// perform is PerformLockedWork's lock, work and release.
func perform(ctx context.Context, c *redlock.Client, clientID string, work func()) (err error) {
	// Fencing is off: work has no way to receive a token (its signature is
	// the users' func()), so a token would protect nothing, while it keeps
	// a counter key per client on the node (for the retention). BuildReport
	// is the version whose writes carry the token. The amnesia guard is off
	// too: it keeps an epoch key per client on the node, and on one node a
	// restart without data loses the lock whatever the client does (the
	// simple version is as safe as the node's persistence).
	lock, err := c.TryAcquire(ctx, LockKey(clientID), TTL, redlock.WithFencing(false), redlock.WithoutAmnesiaGuard())
	if err != nil {
		if errors.Is(err, redlock.ErrTaken) {
			return fmt.Errorf("%w: report %q: %w", ErrResourceLocked, clientID, err)
		}
		return fmt.Errorf("dailyreport: report %q: %w", clientID, err)
	}

	// No recover here: the deferred release runs while a panic unwinds, and
	// the panic then continues unchanged (same value, same stack trace), as
	// it does for runtime.Goexit. Only a normal return reports the release.
	finished := false
	defer func() {
		expired := lock.Validity() <= 0
		relErr := lock.Release(ctx) // runs even if ctx is already canceled
		if !finished {
			return
		}
		switch {
		case relErr != nil:
			err = fmt.Errorf("dailyreport: report %q: work ran, but releasing the lock failed: %w", clientID, relErr)
		case expired:
			err = fmt.Errorf("dailyreport: report %q: work ran past the lock's validity (%v TTL); another pod may have built it at the same time: %w",
				clientID, TTL, redlock.ErrNotHeld)
		}
	}()
	work()
	finished = true
	return nil
}
