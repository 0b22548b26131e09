package chaos

import (
	"sync"

	"github.com/d3b93e30/redlock/fencing"
)

// Resource is a shared store that lock holders write to. Write stores value
// sent with the holder's fencing token (0 when fencing is off) and reports
// whether the store accepted it. Implementations are safe for concurrent use.
type Resource interface {
	Write(token uint64, value string) bool
}

var (
	_ Resource = (*PlainResource)(nil)
	_ Resource = (*FencedResource)(nil)
)

// PlainResource accepts every write (an unfenced store): it is what a lock
// without fencing protects, and it accepts a paused holder's stale write. It
// keeps the last value written and counts writes. It is safe for concurrent
// use; the zero value is ready to use, as is NewPlainResource().
type PlainResource struct {
	mu     sync.Mutex
	value  string
	token  uint64
	writes int
}

// NewPlainResource returns an empty PlainResource.
func NewPlainResource() *PlainResource { return &PlainResource{} }

// Write stores value (sent with token, which is recorded but not checked) and
// always returns true.
func (r *PlainResource) Write(token uint64, value string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.value, r.token = value, token
	r.writes++
	return true
}

// Last returns the last value written and the token it came with ("" and 0
// before any write).
func (r *PlainResource) Last() (value string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.token
}

// Writes returns how many writes the resource accepted (all of them).
func (r *PlainResource) Writes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

// FencedResource is a store fenced by the repository's own fencing.Guard
// (Kleppmann's fencing: the storage checks the token), so the harness tests
// the guard that ships. It rejects a write whose token is lower than the
// highest token it already accepted. Like the Guard it accepts an equal token,
// so that one holder may write several times during its hold; two holders
// given the same token would both be accepted, and the Oracle counts the
// older one's accepted writes after the newer one's as stale writes to the
// fenced resource, while its token-order check reports the repeated token. So
// with fencing off (every token 0) it accepts everything. It keeps the last
// accepted value and counts accepted and rejected writes. It is safe for
// concurrent use; the zero value is ready to use, as is NewFencedResource().
type FencedResource struct {
	guard fencing.Guard

	mu       sync.Mutex
	value    string
	writes   int
	rejected int
}

// NewFencedResource returns an empty FencedResource (highest token 0).
func NewFencedResource() *FencedResource { return &FencedResource{} }

// Write stores value and returns true if fencing.Guard.Do accepts token (at
// least the highest token accepted so far); otherwise it leaves the resource
// unchanged and returns false.
func (r *FencedResource) Write(token uint64, value string) bool {
	err := r.guard.Do(token, func() error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.value = value
		r.writes++
		return nil
	})
	if err != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.rejected++
		return false
	}
	return true
}

// Last returns the last accepted value and the highest token accepted so far
// ("" and 0 before any accepted write).
func (r *FencedResource) Last() (value string, token uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.value, r.guard.Highest()
}

// Writes returns how many writes the resource accepted.
func (r *FencedResource) Writes() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writes
}

// Rejected returns how many writes the resource refused because their token
// was lower than the highest accepted one.
func (r *FencedResource) Rejected() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejected
}
