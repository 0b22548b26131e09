package redlock_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// outageEvents returns the OpOutage events recorded, in order.
func (r *eventLog) outageEvents() []redlock.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []redlock.Event
	for _, e := range r.events {
		if e.Op == redlock.OpOutage {
			out = append(out, e)
		}
	}
	return out
}

// logBuffer is a text logger at debug level writing to a buffer that the
// test reads once the calls have returned.
func logBuffer() (*slog.Logger, func() string) {
	var mu sync.Mutex
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l, func() string {
		mu.Lock()
		defer mu.Unlock()
		return buf.String()
	}
}

// Acquire with a context that never ends, on nodes that all refuse: it
// waits out the outage for the outage limit (DefaultOutageLimit unless set),
// then returns ErrNoQuorum with every node's cause, and tells the Observer
// and the logger once when it starts waiting. With no limit it waits until
// Close, as before. A Semaphore's Acquire, which counts the outage over its
// rounds, does the same, with the semaphore's name as the key.
func TestAcquire_OutageEndsAtTheLimit(t *testing.T) {
	for caller, acquire := range outageCallers() {
		for _, tc := range []struct {
			name  string
			opts  []redlock.Option
			limit time.Duration // 0: none
		}{
			{"default", nil, redlock.DefaultOutageLimit},
			{"WithOutageLimit(5s)", []redlock.Option{redlock.WithOutageLimit(5 * time.Second)}, 5 * time.Second},
			{"WithOutageLimit(0): none", []redlock.Option{redlock.WithOutageLimit(0)}, 0},
		} {
			t.Run(caller+"/"+tc.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					ev := &eventLog{}
					logger, logged := logBuffer()
					c := newCluster(t, 3, append(tc.opts, redlock.WithObserver(ev), redlock.WithLogger(logger))...)
					for _, nd := range c.nodes {
						nd.Refuse()
					}
					type result struct {
						err     error
						key     string
						elapsed time.Duration
					}
					done := make(chan result, 1)
					start := time.Now()
					go func() {
						_, key, err := acquire(c.rl)
						done <- result{err, key, time.Since(start)}
					}()
					if tc.limit == 0 {
						time.Sleep(5 * time.Minute)
						synctest.Wait()
						select {
						case r := <-done:
							t.Fatalf("returned without a limit after %v: %v", r.elapsed, r.err)
						default:
						}
						require.NoError(t, c.rl.Close())
						assert.ErrorIs(t, (<-done).err, redlock.ErrClosed, "Close ends the wait")
						c.endRedials(0, 1, 2)
						return
					}
					var r result
					select {
					case r = <-done:
					case <-time.After(tc.limit + time.Hour):
						t.Fatal("still waiting an hour after the limit")
					}
					require.ErrorIs(t, r.err, redlock.ErrNotAcquired)
					require.ErrorIs(t, r.err, redlock.ErrNoQuorum)
					assert.NotErrorIs(t, r.err, redlock.ErrTaken)
					assert.NotErrorIs(t, r.err, context.DeadlineExceeded)
					// Its first attempt failed at once: no attempt starts after
					// the limit, and the last one started at most one retry
					// delay (250 ms) before it.
					assert.GreaterOrEqual(t, r.elapsed, tc.limit)
					assert.LessOrEqual(t, r.elapsed, tc.limit+250*time.Millisecond)
					qe := quorumError(t, r.err)
					assert.Equal(t, r.key, qe.Key)
					assert.Greater(t, qe.Attempts, 1)
					requireRefusedMajority(t, qe)
					assert.Equal(t, 1, strings.Count(r.err.Error(), "no majority of the nodes answered for"), "one cause: %v", r.err)
					assert.ErrorContains(t, r.err, fmt.Sprintf("(outage limit %v)", tc.limit))
					events := ev.outageEvents()
					require.Len(t, events, 1, "one start, no end")
					assert.False(t, events[0].OK)
					assert.ErrorIs(t, events[0].Err, redlock.ErrNoQuorum)
					assert.Len(t, events[0].Nodes, 3)
					assert.Equal(t, r.key, events[0].Key)
					assert.Equal(t, 1, strings.Count(logged(), `level=WARN msg="redlock: no majority of the nodes answers; waiting"`), logged())
					c.endRedials(0, 1, 2)
				})
			})
		}
	}
}

// An outage that ends before the limit: Acquire takes the lock once a
// majority answers again, and the Observer and the logger hear of the
// outage's start and of its end, with how long it lasted. A Semaphore's
// Acquire, which counts the outage over its rounds, does the same, with
// the semaphore's name as the key.
func TestAcquire_OutageEndsWhenAMajorityAnswers(t *testing.T) {
	for name, acquire := range outageCallers() {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ev := &eventLog{}
				logger, logged := logBuffer()
				c := newCluster(t, 3, redlock.WithObserver(ev), redlock.WithLogger(logger))
				c.nodes[0].Refuse()
				c.nodes[1].Refuse()
				go func() {
					time.Sleep(2 * time.Second)
					c.nodes[0].Revive(t)
				}()
				start := time.Now()
				l, key, err := acquire(c.rl)
				require.NoError(t, err)
				assert.GreaterOrEqual(t, time.Since(start), 2*time.Second)
				events := ev.outageEvents()
				require.Len(t, events, 2)
				assert.False(t, events[0].OK)
				assert.True(t, events[1].OK)
				assert.Equal(t, key, events[1].Key)
				assert.NoError(t, events[1].Err)
				assert.GreaterOrEqual(t, events[1].Latency, 2*time.Second, "how long it lasted")
				assert.LessOrEqual(t, events[1].Latency, time.Since(start))
				assert.Equal(t, 2, events[1].Granted)
				out := logged()
				warn := strings.Index(out, `level=WARN msg="redlock: no majority of the nodes answers; waiting"`)
				info := strings.Index(out, `level=INFO msg="redlock: a majority of the nodes answers again"`)
				assert.True(t, warn >= 0 && info > warn, "start, then end:\n%s", out)
				require.NoError(t, l.Release(context.Background()))
				c.endRedials(1)
			})
		})
	}
}

// outageCallers are the calls that wait an outage out, each taking a lock
// on a cluster's Client with the default retry policy: it returns the
// lock, the key its errors and events name, and its error.
func outageCallers() map[string]func(rl *redlock.Client) (*redlock.Lock, string, error) {
	return map[string]func(rl *redlock.Client) (*redlock.Lock, string, error){
		"Acquire": func(rl *redlock.Client) (*redlock.Lock, string, error) {
			l, err := rl.Acquire(context.Background(), "report", ttl10s)
			return l, "report", err
		},
		"Semaphore.Acquire": func(rl *redlock.Client) (*redlock.Lock, string, error) {
			sem, err := rl.Semaphore("api", 2)
			if err != nil {
				return nil, "api", err
			}
			p, err := sem.Acquire(context.Background(), ttl10s)
			if err != nil {
				return nil, "api", err
			}
			return p.Lock, "api", nil
		},
	}
}

// Do goes through Acquire: on nodes that all refuse it returns ErrNoQuorum
// at the limit, without running its function.
func TestDo_OutageEndsAtTheLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		for _, nd := range c.nodes {
			nd.Refuse()
		}
		start := time.Now()
		done := make(chan error, 1)
		go func() {
			done <- c.rl.Do(context.Background(), "report", ttl10s, func(context.Context, *redlock.Lease) error {
				t.Error("fn ran without the lock")
				return nil
			})
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(redlock.DefaultOutageLimit + time.Hour):
			t.Fatal("still waiting an hour after the limit")
		}
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.GreaterOrEqual(t, time.Since(start), redlock.DefaultOutageLimit)
		c.endRedials(0, 1, 2)
	})
}

// TryAcquire makes one attempt: on refusing nodes it returns ErrNoQuorum at
// once, and reports no outage (it does not wait one out).
func TestTryAcquire_NoQuorumAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		c.nodes[0].Refuse()
		c.nodes[2].Refuse()
		start := time.Now()
		_, err := c.rl.TryAcquire(context.Background(), "report", ttl10s)
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		assert.Zero(t, time.Since(start))
		assert.Empty(t, ev.outageEvents())
		c.endRedials(0, 2)
	})
}

// The same on real sockets: three addresses where nothing listens refuse
// every connection. Acquire and Do with a context that has no deadline
// return ErrNoQuorum once the (here short) outage limit has passed, with
// each node's "connection refused".
func TestAcquire_RefusedAddressesEndAtTheLimit(t *testing.T) {
	urls := []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"}
	// A refused dial fails at once, but on a loaded machine its goroutine
	// may not run within the default 100 ms per-node timeout, and the node
	// would show timed out.
	rl, err := redlock.Dial(urls, redlock.WithOutageLimit(300*time.Millisecond), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	defer func() {
		require.NoError(t, rl.Close())
		// go-redis re-dials a refused node in the background once a
		// second until its client is closed: let those loops see it.
		time.Sleep(1500 * time.Millisecond)
	}()
	for name, call := range map[string]func() error{
		"Acquire": func() error {
			_, err := rl.Acquire(context.Background(), "report", ttl10s)
			return err
		},
		"Do": func() error {
			return rl.Do(context.Background(), "report", ttl10s, func(context.Context, *redlock.Lease) error { return errors.New("ran") })
		},
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() { done <- call() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("still waiting after a minute")
			}
			require.ErrorIs(t, err, redlock.ErrNoQuorum)
			requireRefusedMajority(t, quorumError(t, err))
		})
	}
}

// requireRefusedMajority requires a majority of qe's nodes to be
// unreachable with "connection refused" as their cause; the vote does not
// wait for the others, which may still be pending.
func requireRefusedMajority(t *testing.T, qe *redlock.QuorumError) {
	t.Helper()
	refused := 0
	for i, n := range qe.Nodes {
		if n.Outcome == redlock.OutcomePending {
			continue
		}
		assert.Equal(t, redlock.OutcomeUnreachable, n.Outcome, "node %d", i)
		assert.ErrorIs(t, n.Err, syscall.ECONNREFUSED, "node %d: its cause is attached", i)
		refused++
	}
	assert.GreaterOrEqual(t, refused, qe.Quorum, "%v", qe)
}

func TestWithOutageLimit_Negative(t *testing.T) {
	requireNewInvalid(t, "outage limit", redlock.WithOutageLimit(-time.Second))
}
