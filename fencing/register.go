package fencing

import "sync"

// Register is a fenced register: it fences a resource held in the memory of
// one Go process (a map, a file handle, a connection to a system that cannot
// check tokens itself). It remembers the highest token it has accepted and
// refuses lower ones: the storage-side check of Kleppmann's "How to do
// distributed locking" (2016).
//
// Use Do to make the check and the write one step: Do holds the Register while
// fn runs, so a stale writer cannot pass the check, wait, and then write after
// a newer one. Check alone is for when the caller already serializes the
// writes, or only needs to learn whether a token is stale.
//
// A Register is safe for concurrent use. The zero value is ready to use and has
// accepted nothing (its highest token is 0, so it accepts every token,
// including the 0 that redlock returns when fencing is off). A Register must not
// be copied after first use.
type Register struct {
	mu      sync.Mutex
	highest uint64
}

// Check accepts token if it is at least the highest token accepted so far and
// records it as the new highest. It returns a *StaleError (ErrStale) for a
// lower token and then records nothing.
func (r *Register) Check(token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.check(token)
}

func (r *Register) check(token uint64) error {
	if token < r.highest {
		return &StaleError{Token: token, Highest: r.highest}
	}
	r.highest = token
	return nil
}

// Do runs fn if token is accepted (as by Check) and returns fn's error; for a
// stale token it returns a *StaleError (ErrStale) without running fn. The
// Register stays locked while fn runs: writes through Do happen one at a time,
// in an order where the tokens never go down. fn must not call the same
// Register's methods (that would deadlock).
//
// The token is recorded before fn runs, and stays recorded if fn fails: once
// a holder with a higher token has shown up, every lower token is stale
// whether or not that holder's write succeeded.
func (r *Register) Do(token uint64, fn func() error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.check(token); err != nil {
		return err
	}
	return fn()
}

// Highest returns the highest token accepted so far (0 before any).
func (r *Register) Highest() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}
