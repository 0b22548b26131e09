package chaos

// The multi-key lock workload: clients lock overlapping sets of keys with
// Client.AcquireMulti (and keep them with MultiLock.KeepAlive), and some lock
// one of those keys alone with Acquire. Every set contains the workload's
// key, so any two clients' sets overlap: the oracle's check that no two
// holds overlap in time is then exactly "no two holders of any key at once",
// and the workload key's fencing token, which every holder writes with, is
// one sequence that the fenced resource can order. The sets name the other
// keys in different orders ({key, a}, {b, key}, {a, b, key}), so a lock that
// took keys one at a time in the caller's order could deadlock or grant a
// part; a multi-key lock that grants part of its keys (the partial-grant
// mutant) lets two clients hold the workload key at once.

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// ModeMulti: client i locks the key set multiSet(key, i): a multi-key set
// with AcquireMulti and KeepAlive, writing while the Lease's context is live
// (with the workload key's token), then Lease.Release; or, for every fourth
// client, the workload key alone as in ModeAcquire.
const ModeMulti Mode = "multi"

// multiSet returns the keys client i of a ModeMulti workload locks: every
// set contains key; the others share key's hash tag, so that the set also
// fits one Redis Cluster slot.
func multiSet(key string, i int) []string {
	a, b := tagged(key, ":a"), tagged(key, ":b")
	switch i % 4 {
	case 0:
		return []string{key, a}
	case 1:
		return []string{b, key}
	case 2:
		return []string{a, b, key}
	}
	return []string{key}
}

// tagged returns key+suffix in key's hash slot: key's own hash tag if it has
// one, else key itself as the tag.
func tagged(key, suffix string) string {
	if open := strings.IndexByte(key, '{'); open >= 0 && strings.IndexByte(key[open+1:], '}') > 0 {
		return key + suffix
	}
	return "{" + key + "}" + suffix
}

// AsMulti returns s run with multi-key locks: every client uses ModeMulti on
// the workload's key, so three of four lock two or three keys at once and
// the fourth the key alone. The fault schedule, checks and expected verdict
// stay the same: a multi-key lock promises per key what the lock promises.
// A scenario whose clients all use ModeMulti is returned unchanged.
func AsMulti(s Scenario) Scenario {
	w := s.Workload
	if len(w.Modes) == 1 && w.Modes[0] == ModeMulti {
		return s
	}
	w.Modes = []Mode{ModeMulti}
	if isElectionMode(w.mode(0)) || strings.HasSuffix(w.key(), ":leader") {
		w.Key = ""
	}
	w.Extend, w.ExtendReleased, w.ExtendLate = false, false, 0
	s.Workload = w
	s.Summary = "with multi-key locks: " + s.Summary
	return s
}

// multiScenarios are the scenarios of the multi-key lock that Find knows
// beside the catalogue: the mutants of the multi-key lock name them.
func multiScenarios() []Scenario {
	w := Workload{Clients: 8, TTL: catalogueTTL, NodeTimeout: catalogueNodeTimeout, Hold: 5 * time.Millisecond,
		Gap: 2 * time.Millisecond, Modes: []Mode{ModeMulti}}
	return []Scenario{{
		Name: "multi-key", Summary: "8 clients lock overlapping key sets ({k, a}, {b, k}, {a, b, k}) with multi-key locks, and k alone; nothing fails",
		Expect: Safe, Why: "every node sets all of a lock's keys or none, and a majority must set all of them, so two locks that share a key never both get a majority; each key's token grows from holder to holder",
		Workload: w, Duration: trialLength, Availability: Available, KeysReleased: true,
	}}
}

// holdMulti is one hold in ModeMulti. It reports whether the lock was
// acquired.
func (h *holder) holdMulti(ctx context.Context, n int) bool {
	w := h.w
	keys := multiSet(h.key, h.i)
	if len(keys) == 1 {
		return h.holdLock(ctx, n)
	}
	actx, cancel := context.WithTimeout(ctx, h.acquireTimeout)
	start := time.Now()
	ml, err := h.c.AcquireMulti(actx, keys, w.TTL)
	cancel()
	latency := time.Since(start)
	if err != nil {
		h.failed(ctx, err, latency)
		return false
	}
	token, _ := ml.Token(h.key)
	lease, err := ml.KeepAlive(ctx)
	if err != nil {
		// Not kept alive: work for the acquisition's validity only.
		h.o.Note(time.Now(), fmt.Sprintf("client %d: keepalive of %v: %v", h.i, keys, err))
		hold := h.o.Acquired(h.i, token, ml.AcquiredAt(), ml.ValidUntil(), latency, ml.Attempts())
		for first := true; first || time.Now().Before(ml.ValidUntil()); first = false {
			h.write(hold, token)
			sleepCtx(ctx, min(w.writeEvery(), time.Until(ml.ValidUntil())))
		}
		h.o.Released(hold, time.Now())
		if ml.Release(context.WithoutCancel(ctx)) == nil {
			h.stats.release(ml.Owner())
		}
		return true
	}
	lock := lease.Lock()
	hold := h.o.Acquired(h.i, token, lock.AcquiredAt(), lock.ValidUntil(), latency, ml.Attempts())
	h.fire(acquisition{Client: h.i, Nth: n, Lock: lock})
	h.pause(ctx, hold, token, n)
	deadline := time.Now().Add(w.holdFor(h.i))
	for first := true; first || (time.Now().Before(deadline) && ctx.Err() == nil); first = false {
		if lease.Context().Err() != nil {
			break
		}
		if l := lease.Lock(); l != lock {
			lock = l
			h.o.Extended(hold, l.ValidUntil())
		}
		h.write(hold, token)
		sleepCtx(ctx, min(w.writeEvery(), time.Until(deadline)))
	}
	h.o.Released(hold, time.Now())
	if lease.Release(context.WithoutCancel(ctx)) == nil {
		h.stats.release(ml.Owner())
	}
	return true
}
