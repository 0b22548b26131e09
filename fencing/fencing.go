// Package fencing is the resource side of fencing tokens: it lets the thing a
// lock protects reject the writes of a holder whose lock has already passed to
// someone else.
//
// A lock with a timeout (a lease) cannot by itself stop a holder that pauses:
// a garbage-collection pause, a swapped-out process or a slow network can
// outlast the lock's validity, the lock passes to another client, and the
// first holder then wakes up and writes as if it still held the lock. Martin
// Kleppmann ("How to do distributed locking", 2016,
// https://martin.kleppmann.com/2016/02/08/how-to-do-distributed-locking.html)
// shows that the storage itself must check: every holder sends the fencing
// token it got with the lock, tokens increase from one holder to the next, and
// the storage refuses a write whose token is lower than one it has already
// accepted. The lock client cannot do this check for you, because the stale
// holder does not know that it is stale.
//
// redlock.Lock.Token returns such a token (see docs/fencing.md for why the
// tokens of successive holders increase, and when they do not). This package
// gives three ways to check it:
//
//   - Register, for a resource inside one Go process;
//   - SetIfNewer and GetWithToken, for a value kept in Redis (a Lua script that
//     compares and stores atomically);
//   - for SQL, no code is needed: make the update conditional on the stored
//     token, e.g. UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND
//     fence < $2, and treat "0 rows affected" as stale (docs/fencing.md).
//
// Register and SetIfNewer reject a token lower than the highest accepted and
// accept an equal one, so that one holder may write several times (the SQL
// condition above accepts each token once; use fence <= $2 to match). A
// rejection is ErrStale (errors.Is), carried by a *StaleError (errors.As) that
// says which token was refused and which higher token the resource had
// already seen.
package fencing

import (
	"errors"
	"fmt"
)

// ErrStale reports a write refused because its fencing token is lower than a
// token the resource has already accepted: the writer's lock has passed to a
// later holder. Test for it with errors.Is; the error is a *StaleError.
var ErrStale = errors.New("fencing: stale token")

// StaleError is the error of a refused write. It matches ErrStale with
// errors.Is.
type StaleError struct {
	// Token is the token that was refused.
	Token uint64
	// Highest is the highest token the resource had accepted when it refused
	// Token (Highest > Token).
	Highest uint64
}

// Error implements error.
func (e *StaleError) Error() string {
	return fmt.Sprintf("fencing: stale token %d: the resource has already accepted token %d", e.Token, e.Highest)
}

// Unwrap returns ErrStale, so that errors.Is(err, ErrStale) holds.
func (e *StaleError) Unwrap() error { return ErrStale }
