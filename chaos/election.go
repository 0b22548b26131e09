package chaos

// The leader-election workload: the clients are candidates of one election
// (Client.Campaign, Client.Lead), each leadership is a hold, its term the
// hold's token. The oracle's checks then say what the election promises: no
// two leaderships overlap in time, terms strictly increase from leader to
// leader, and where a scenario is beyond the lock's limits (pauses, clock
// steps, unguarded amnesia) the fenced resource refuses every write of a
// stale term.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// The election modes.
const (
	// ModeElect: Campaign, write while the Leadership's context is live
	// (for the hold time), Resign.
	ModeElect Mode = "elect"
	// ModeLead: Client.Lead. Each time the client is elected, fn writes
	// while the leadership lasts, for the hold time; fn then returns (Lead
	// resigns and returns), or, when the leadership was lost first, fn
	// finishes its hold without writing, as work in progress would, and
	// Lead resigns and campaigns again.
	ModeLead Mode = "lead"
)

// electionName is the name of the election whose lock key is the
// workload's key: ElectionKey(name) = key.
func electionName(key string) string {
	if strings.HasPrefix(key, "{") && strings.HasSuffix(key, "}:leader") {
		return key[1 : len(key)-len("}:leader")]
	}
	return strings.TrimSuffix(key, ":leader")
}

// isElectionMode reports whether m is one of the election modes.
func isElectionMode(m Mode) bool { return m == ModeElect || m == ModeLead }

// AsElection returns s run as a leader election: every client is a
// candidate of the election whose lock key is the workload's (Acquire,
// KeepAlive and exec clients campaign with ModeElect, Do clients with
// ModeLead), and the fault schedule, checks and expected verdict stay the
// same. A scenario whose clients already elect is returned unchanged.
func AsElection(s Scenario) Scenario {
	w := s.Workload
	modes := w.Modes
	if len(modes) == 0 {
		modes = []Mode{ModeAcquire}
	}
	conv := make([]Mode, len(modes))
	already := true
	for i, m := range modes {
		switch {
		case isElectionMode(m):
			conv[i] = m
		case m == ModeDo:
			conv[i], already = ModeLead, false
		default:
			conv[i], already = ModeElect, false
		}
	}
	if already {
		return s
	}
	w.Modes = conv
	w.Key = redlock.ElectionKey(w.key())
	w.Extend, w.ExtendReleased = false, false
	s.Workload = w
	s.Summary = "as an election: " + s.Summary
	return s
}

// holdElect is one leadership in ModeElect. It reports whether the client
// was elected.
func (h *holder) holdElect(ctx context.Context, n int) bool {
	w := h.w
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopWaiting := time.AfterFunc(h.acquireTimeout, cancel)
	start := time.Now()
	l, err := h.c.Campaign(cctx, electionName(h.key), "client-"+strconv.Itoa(h.i), w.TTL)
	stopWaiting.Stop()
	latency := time.Since(start)
	if err != nil {
		h.failed(ctx, err, latency)
		return false
	}
	lock := l.Lease().Lock()
	hold := h.o.Acquired(h.i, l.Term(), lock.AcquiredAt(), lock.ValidUntil(), latency, lock.Attempts())
	h.fire(acquisition{Client: h.i, Nth: n, Lock: lock})
	h.pause(ctx, hold, l.Term(), n)
	h.lead(ctx, l, hold, lock)
	h.o.Released(hold, time.Now())
	if l.Resign(context.WithoutCancel(ctx)) == nil {
		h.stats.release(lock.Owner())
	}
	return true
}

// lead writes for the client's hold time while l lasts, and records its
// extensions.
func (h *holder) lead(ctx context.Context, l *redlock.Leadership, hold oracle.HoldID, lock *redlock.Lock) {
	deadline := time.Now().Add(h.w.holdFor(h.i))
	for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
		if l.Err() != nil {
			return
		}
		if nl := l.Lease().Lock(); nl != lock {
			lock = nl
			h.o.Extended(hold, nl.ValidUntil())
		}
		h.write(hold, l.Term())
		sleepCtx(ctx, min(h.w.writeEvery(), time.Until(deadline)))
	}
}

// holdLead is one call of Client.Lead in ModeLead: one leadership, more
// when it is lost and the client elected again. It reports whether the
// client was elected.
func (h *holder) holdLead(ctx context.Context, n int) bool {
	w := h.w
	elected := false
	start := time.Now()
	_ = h.c.Lead(ctx, electionName(h.key), "client-"+strconv.Itoa(h.i), w.TTL, func(lctx context.Context, l *redlock.Leadership) error {
		elected = true
		h.leads++
		lock := l.Lease().Lock()
		hold := h.o.Acquired(h.i, l.Term(), lock.AcquiredAt(), lock.ValidUntil(), lock.AcquiredAt().Sub(start), lock.Attempts())
		h.fire(acquisition{Client: h.i, Nth: h.leads, Lock: lock})
		h.pause(ctx, hold, l.Term(), h.leads)
		deadline := time.Now().Add(w.holdFor(h.i))
		h.lead(ctx, l, hold, lock)
		h.o.Released(hold, time.Now())
		if lctx.Err() != nil && ctx.Err() == nil {
			// Lost: finish the hold's other work, then return.
			h.o.Note(time.Now(), fmt.Sprintf("client %d lost its leadership: %v", h.i, l.Err()))
			sleepCtx(ctx, time.Until(deadline))
			start = time.Now()
			return lctx.Err()
		}
		return nil
	})
	return elected
}
