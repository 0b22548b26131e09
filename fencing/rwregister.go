package fencing

import "sync"

// RWRegister fences a resource shared by the readers and writers of a
// redlock.RWMutex, in one Go process. A writer's token is above every
// earlier reader's and writer's; a reader's token is that of the last
// writer before it. So the register accepts:
//
//   - a read (CheckRead) whose token is at least the highest write token
//     accepted: a lower one raced a newer write;
//   - a write (CheckWrite) whose token is at least the highest write token
//     and above the highest read token accepted: a writer whose token was
//     read already has been followed by readers, so it paused past its
//     lock (its late write would change what they read), and a lower token
//     is a stale writer's.
//
// The zero value is ready to use. It is safe for concurrent use and must
// not be copied after first use.
type RWRegister struct {
	mu           sync.Mutex
	write, read  uint64
	wrote, reads bool
}

// CheckRead accepts a read with token (see RWRegister) and records it; it
// returns a *StaleError (ErrStale) for a read that raced a newer write.
func (r *RWRegister) CheckRead(token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wrote && token < r.write {
		return &StaleError{Token: token, Highest: r.write}
	}
	if !r.reads || token > r.read {
		r.read, r.reads = token, true
	}
	return nil
}

// CheckWrite accepts a write with token (see RWRegister) and records it; it
// returns a *StaleError (ErrStale) for a stale writer's, whose Highest is
// the highest write token, or the highest read token when readers have
// already read at or above token.
func (r *RWRegister) CheckWrite(token uint64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wrote && token < r.write {
		return &StaleError{Token: token, Highest: r.write}
	}
	if r.reads && token <= r.read {
		return &StaleError{Token: token, Highest: r.read}
	}
	r.write, r.wrote = token, true
	return nil
}
