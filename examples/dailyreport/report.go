// Package dailyreport is the users' first use case, kept working as an
// example and a test.
//
// Five worker pods generate a daily PDF report per client. Two pods must never
// build the same client's report at once, and a pod that crashes while
// building one must not block that report forever. Each pod calls
// PerformLockedWork for every client: the first pod to lock the client's
// report builds it, the others get ErrResourceLocked and move on, and a lock
// left behind by a crashed pod expires after TTL.
//
// PerformLockedWork locks on one Redis node; PerformLockedWorkN does the same
// on N independent nodes (the Redlock case), so the lock survives the loss of
// a minority of them.
//
// The lock makes "check whether the report exists, then build it" atomic
// across pods; it does not by itself make a report get built once per day.
// Work should start by checking whether another pod already built the report
// (see cmd/dailyreport).
package dailyreport

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/redis/go-redis/v9"
)

// TTL is how long a report's lock lives on the nodes. A pod that crashes while
// holding the lock blocks that report for at most this long. Work must finish
// well within it: PerformLockedWork returns an error when it did not.
const TTL = 15 * time.Second

// ErrResourceLocked means another owner holds the report's lock: the work did
// not run. A worker that gets it moves on to the next report. The error also
// wraps the library's *redlock.QuorumError (so errors.Is(err,
// redlock.ErrNotAcquired) holds and errors.As reaches the per-node outcomes).
var ErrResourceLocked = errors.New("dailyreport: resource is locked")

// LockKey returns the lock key of clientID's report: "lock:report:{clientID}".
// The braces are literal: a Redis Cluster hash tag, so every key of one client
// lands in the same slot.
func LockKey(clientID string) string {
	return "lock:report:{" + clientID + "}"
}

// PerformLockedWork runs work while holding the lock on clientID's report on
// the single Redis node rdb (a one-node Redlock), and releases it afterwards.
//
// It makes one attempt: when another owner holds the lock it returns an
// error matching ErrResourceLocked at once, without running work. Otherwise
// it sets LockKey(clientID) with a random owner value and a TTL of TTL, runs
// work, and deletes the key only if it still holds its owner value. The
// release also happens when work panics; the panic then continues with its
// original value.
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
	if err := validate(ctx, clientID, work); err != nil {
		return err
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

// PerformLockedWorkN is PerformLockedWork on the N independent Redis nodes of
// client (a Redlock): the lock is held when a majority of the nodes granted
// it. ErrResourceLocked means at least one node reported the key held by
// another owner and no majority was won (another pod holds it, or pods
// contending for it at the same moment split the vote: none of them builds
// the report in this attempt). A nil client is an error; client is not
// closed.
func PerformLockedWorkN(ctx context.Context, client *redlock.Client, clientID string, work func()) error {
	if client == nil {
		return fmt.Errorf("dailyreport: nil redlock client: %w", redlock.ErrInvalidArgument)
	}
	if err := validate(ctx, clientID, work); err != nil {
		return err
	}
	return perform(ctx, client, clientID, work)
}

func validate(ctx context.Context, clientID string, work func()) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("dailyreport: nil context: %w", redlock.ErrInvalidArgument)
	case clientID == "":
		return fmt.Errorf("dailyreport: empty client id: %w", redlock.ErrInvalidArgument)
	case work == nil:
		return fmt.Errorf("dailyreport: nil work for client %q: %w", clientID, redlock.ErrInvalidArgument)
	}
	return nil
}

// perform is the worker shared by the one-node and the N-node versions.
func perform(ctx context.Context, c *redlock.Client, clientID string, work func()) (err error) {
	// Fencing is off: work has no way to receive a token (its signature is
	// the users' func()), so a token would protect nothing, while it keeps
	// a counter key per client on every node (for the retention) and can
	// cost a second round trip. A report store that can check tokens should
	// call Client.Acquire itself and pass Lock.Token() along with each write.
	lock, err := c.TryAcquire(ctx, LockKey(clientID), TTL, redlock.WithFencing(false))
	if err != nil {
		if heldByAnother(err) {
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

// heldByAnother reports whether a failed acquisition saw the key held by
// another owner on at least one node, as opposed to failing for want of
// nodes (unreachable, timed out) or time.
func heldByAnother(err error) bool {
	var qe *redlock.QuorumError
	if !errors.Is(err, redlock.ErrNotAcquired) || !errors.As(err, &qe) {
		return false
	}
	for _, n := range qe.Nodes {
		if n.Outcome == redlock.OutcomeTaken {
			return true
		}
	}
	return false
}
