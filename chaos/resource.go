package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/d3b93e30/redlock/fencing"
)

// resources are the two shared stores every hold writes to, throughout the
// hold. The plain store checks nothing (every write is accepted): it shows
// what a lock without fencing protects, and it accepts a paused holder's
// stale write. The fenced store is the cluster's FencedStore: by default
// the repository's own fencing.Register, so every chaos run tests it
// (Kleppmann's fencing: the storage checks the token); or real storage, a
// Redis compare-and-set (RedisStore) or a database. Like the Register, each
// accepts an equal token, so that one holder may write several times; two
// holders given the same token would both pass, and the oracle then counts
// the older one's accepted writes after the newer one's as stale fenced
// writes, while its token-order check reports the repeated token. With
// fencing off (every token 0) it accepts everything. The values written are
// not kept: the oracle records each write and whether it was accepted.
type resources struct {
	fenced FencedStore
	failed *firstError // the first error of the fenced store, if any
}

// firstError keeps the first error it is given.
type firstError struct {
	mu  sync.Mutex
	err error
}

func (f *firstError) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstError) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}

// newResources returns resources whose fenced store is a new fencing.Register.
func newResources() resources {
	return resources{fenced: NewRegisterStore(), failed: new(firstError)}
}

// storeTimeout bounds one write to a fenced store.
const storeTimeout = 5 * time.Second

// writePlain writes to the plain store, which accepts everything.
func (resources) writePlain(uint64) bool { return true }

// writeFenced writes to the fenced store and reports whether it accepted
// token (at least the highest it accepted so far). A store error is kept
// for err, and the write counts as refused; the trial then fails.
func (r resources) writeFenced(token uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	ok, err := r.fenced.Write(ctx, token)
	if err != nil {
		r.failed.set(fmt.Errorf("chaos: fenced store %s: write of token %d: %w", r.fenced.Name(), token, err))
		return false
	}
	return ok
}

// err returns the first error of the fenced store.
func (r resources) err() error { return r.failed.get() }

// FencedStore is the storage behind the fenced resource of a chaos run: it
// keeps the highest fencing token it accepted and refuses a lower one, in
// the same atomic step as the write (docs/fencing.md, "Checking the token in
// your storage"); it accepts an equal token. Set it with
// ClusterOptions.Fenced; the default is NewRegisterStore. The harness calls
// Reset before each trial and Write from many goroutines at once.
type FencedStore interface {
	// Name says what the store is, for a run's output.
	Name() string
	// Reset forgets every write and token, before a trial.
	Reset(ctx context.Context) error
	// Write writes a value with token. accepted is false when the store
	// refused the token as stale; an error means the outcome is unknown,
	// and the harness stops the run with it.
	Write(ctx context.Context, token uint64) (accepted bool, err error)
}

// registerStore is a FencedStore in this process: fencing.Register.
type registerStore struct {
	mu  sync.Mutex
	reg *fencing.Register
}

// NewRegisterStore returns the default FencedStore: the repository's own
// fencing.Register, in this process (Reset replaces it with a new one). Its
// Write never fails.
func NewRegisterStore() FencedStore { return &registerStore{reg: new(fencing.Register)} }

func (s *registerStore) Name() string { return "fencing.Register (in process)" }

func (s *registerStore) Reset(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reg = new(fencing.Register)
	return nil
}

func (s *registerStore) Write(_ context.Context, token uint64) (bool, error) {
	s.mu.Lock()
	reg := s.reg
	s.mu.Unlock()
	return reg.Check(token) == nil, nil
}

// trialResources resets the cluster's fenced store for a trial and returns
// the resources the trial writes to.
func (c *Cluster) trialResources(ctx context.Context) (resources, error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	if err := c.fenced.Reset(ctx); err != nil {
		return resources{}, fmt.Errorf("chaos: reset fenced store %s: %w", c.fenced.Name(), err)
	}
	return resources{fenced: c.fenced, failed: new(firstError)}, nil
}

// FencedStore returns the store behind the cluster's fenced resource
// (ClusterOptions.Fenced, or the default fencing.Register).
func (c *Cluster) FencedStore() FencedStore { return c.fenced }

// isStale reports whether err is a fencing refusal (fencing.ErrStale).
func isStale(err error) bool { return errors.Is(err, fencing.ErrStale) }

// StoreScenarios returns the catalogue's scenarios in which the fenced
// store decides something (a holder writes after its lock passed on, or two
// holders overlap): client-pause, the amnesia and the clock scenarios. Run
// them with ClusterOptions.Fenced set to check a real store.
func StoreScenarios() []Scenario {
	var out []Scenario
	for _, s := range Catalogue() {
		switch s.Name {
		case "client-pause", "amnesia-unguarded", "amnesia-guarded",
			"clock-jump", "clock-fast", "clock-drift-in-budget", "clock-back-amnesia":
			out = append(out, s)
		}
	}
	return out
}

// CheckFencedStore checks that s keeps the contract the harness relies on,
// after a Reset: a first write is accepted whatever its token; a lower
// token than the highest accepted is refused, an equal or higher one is
// accepted, up to 2^62 (tokens are microsecond clocks, far below; a SQL
// bigint column holds up to 2^63 − 1); Reset forgets the highest; and
// after many concurrent writes the store holds the highest of their tokens.
// It returns the first breach, or the error of a call.
func CheckFencedStore(ctx context.Context, s FencedStore) error {
	if err := s.Reset(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	steps := []struct {
		token uint64
		ok    bool
	}{{5, true}, {3, false}, {5, true}, {7, true}, {6, false}, {0, false}, {1 << 62, true}, {1<<62 - 1, false}}
	for _, st := range steps {
		ok, err := s.Write(ctx, st.token)
		if err != nil {
			return fmt.Errorf("write %d: %w", st.token, err)
		}
		if ok != st.ok {
			return fmt.Errorf("%s: write of token %d: accepted %v, want %v", s.Name(), st.token, ok, st.ok)
		}
	}
	if err := s.Reset(ctx); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if ok, err := s.Write(ctx, 2); err != nil || !ok {
		return fmt.Errorf("%s: after Reset a write of token 2: accepted %v, error %v", s.Name(), ok, err)
	}
	// Concurrent writers of interleaved tokens, arriving in any order: the
	// store must end with the highest one (that token is taken again, the
	// one below it is not).
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for w := range errs {
		wg.Go(func() {
			for i := range 20 {
				tok := uint64(10 + i*len(errs) + w)
				if _, err := s.Write(ctx, tok); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	top := uint64(10 + 20*len(errs) - 1)
	if ok, err := s.Write(ctx, top); err != nil || !ok {
		return fmt.Errorf("%s: after concurrent writes up to %d, that token again: accepted %v, error %v", s.Name(), top, ok, err)
	}
	if ok, err := s.Write(ctx, top-1); err != nil || ok {
		return fmt.Errorf("%s: after %d, token %d: accepted %v, error %v", s.Name(), top, top-1, ok, err)
	}
	return s.Reset(ctx)
}
