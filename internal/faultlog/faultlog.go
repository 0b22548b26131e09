// Package faultlog runs a chaos trial's fault schedule on timers and keeps
// the bands of the faults still in force, recording each band in the trial's
// oracle when it closes. The chaos harness and the etcd comparison share it;
// what a fault does to a node is each one's own business.
package faultlog

import (
	"context"
	"sync"
	"time"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// Band names a fault in force on one node: the label the timeline shows, and
// whether it is a network fault (one that healing the node's network ends).
type Band struct {
	Node    int
	What    string
	Network bool
}

// Log is one trial's fault schedule and its open bands. It is safe for
// concurrent use; create it with New and end it with Stop.
type Log struct {
	oracle *oracle.Oracle

	mu     sync.Mutex
	timers []*time.Timer
	wg     sync.WaitGroup
	open   map[Band]time.Time
}

// New returns a Log that records closed bands in o.
func New(o *oracle.Oracle) *Log {
	return &Log{oracle: o, open: map[Band]time.Time{}}
}

// After runs fn after d unless ctx has ended by then; Stop cancels it if it
// has not started, or waits for it.
func (l *Log) After(ctx context.Context, d time.Duration, fn func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wg.Add(1)
	l.timers = append(l.timers, time.AfterFunc(d, func() {
		defer l.wg.Done()
		if ctx.Err() == nil {
			fn()
		}
	}))
}

// Open records that band b began at from. It stays open until Close or Stop
// ends it; opening a band that is already open moves its start to from.
func (l *Log) Open(b Band, from time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open[b] = from
}

// Close ends, at at, every open band that match accepts, and records each in
// the oracle.
func (l *Log) Close(at time.Time, match func(Band) bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for b, from := range l.open {
		if match(b) {
			l.oracle.Fault(b.Node, b.What, from, at)
			delete(l.open, b)
		}
	}
}

// Stop cancels the pending timers, waits for the running ones, and ends every
// band still open now, at the trial's end.
func (l *Log) Stop() {
	l.mu.Lock()
	for _, t := range l.timers {
		if t.Stop() {
			l.wg.Done()
		}
	}
	l.timers = nil
	l.mu.Unlock()
	l.wg.Wait()
	l.Close(time.Now(), func(Band) bool { return true })
}
