package fencing

import "sync"

// Guard fences a resource held in the memory of one Go process: a map, a
// file handle, a connection to a system that cannot check tokens itself. It
// remembers the highest token it has accepted and refuses lower ones: the
// storage-side check of Kleppmann's "How to do distributed locking" (2016).
//
// Use Do to make the check and the write one step: Do holds the Guard while
// fn runs, so a stale writer cannot pass the check, wait, and then write after
// a newer one. Check alone is for when the caller already serializes the
// writes, or only needs to learn whether a token is stale.
//
// A Guard is safe for concurrent use. The zero value is ready to use and has
// accepted nothing (its highest token is 0, so it accepts every token,
// including the 0 that redlock returns when fencing is off). A Guard must not
// be copied after first use.
type Guard struct {
	mu      sync.Mutex
	highest uint64
}

// Check accepts token if it is at least the highest token accepted so far and
// records it as the new highest. It returns a *StaleError (ErrStale) for a
// lower token and then records nothing.
func (g *Guard) Check(token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.check(token)
}

func (g *Guard) check(token uint64) error {
	if token < g.highest {
		return &StaleError{Token: token, Highest: g.highest}
	}
	g.highest = token
	return nil
}

// Do runs fn if token is accepted (as by Check) and returns fn's error; for a
// stale token it returns a *StaleError (ErrStale) without running fn. The
// Guard stays locked while fn runs: writes through Do happen one at a time,
// in an order where the tokens never go down. fn must not call the same
// Guard's methods (that would deadlock).
//
// The token is recorded before fn runs, and stays recorded if fn fails: once
// a holder with a higher token has shown up, every lower token is stale
// whether or not that holder's write succeeded.
func (g *Guard) Do(token uint64, fn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.check(token); err != nil {
		return err
	}
	return fn()
}

// Highest returns the highest token accepted so far (0 before any).
func (g *Guard) Highest() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest
}
