package redlock

// The Client's view of its nodes' health, updated from every node call's
// outcome, and the log lines that mark its changes.

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// HealthState is what a Client last saw of one node (NodeHealth.State).
type HealthState int

// The states of a node in the Client's health view.
const (
	// HealthUnknown: no call to the node has ended yet.
	HealthUnknown HealthState = iota
	// HealthUp: the node's latest call got its answer.
	HealthUp
	// HealthDown: the node's latest call failed: unreachable, no reply
	// within the per-node timeout, or an error reply (NodeHealth.LastError
	// says which). A node whose reply only the caller's context cut short
	// does not change state, nor does a reply about one key's data
	// (WRONGTYPE).
	HealthDown
	// HealthQuarantined: the node answers, but the amnesia guard does not
	// count its votes until NodeHealth.QuarantinedUntil (it may have lost
	// its data).
	HealthQuarantined
)

var healthNames = [...]string{"unknown", "up", "down", "quarantined"}

// String returns "unknown", "up", "down" or "quarantined".
func (s HealthState) String() string {
	if s < 0 || int(s) >= len(healthNames) {
		return "invalid"
	}
	return healthNames[s]
}

// NodeHealth is what a Client last saw of one node (Client.Health).
type NodeHealth struct {
	// Node names the node, as in NodeResult.Node.
	Node string
	// State is the node's state now.
	State HealthState
	// DownSince is when the node's calls started failing; zero unless
	// State is HealthDown.
	DownSince time.Time
	// LastError is the error of the node's latest failed call, kept after
	// the node recovers; nil when none failed.
	LastError error
	// LastAnswer is when the node last answered a call; zero when never.
	LastAnswer time.Time
	// QuarantinedUntil is when the node's quarantine ends (see
	// HealthQuarantined); zero when it is not quarantined.
	QuarantinedUntil time.Time
	// Incarnation identifies the node's current process (its INFO server
	// run_id) when known; "" otherwise.
	Incarnation string
}

// Health returns what the Client last saw of each of its nodes, in node
// order: updated by every call to the node (Acquire, Extend, Release,
// Inspect, Leader, ...), without any call of its own. A Client that has not
// called a node yet reports it HealthUnknown. It never blocks on a node and
// works on a closed Client.
//
// Each change of a node's state is logged once, through the Client's
// logger (the WithLogger given to New or Dial; the package logs nothing by
// default): at WARN when the node goes down (with the error) or into
// quarantine, at INFO when it answers again or its quarantine ends. Calls
// that fail in the same way again are not logged.
func (c *Client) Health() []NodeHealth {
	now := time.Now()
	out := make([]NodeHealth, len(c.nodes))
	for i := range c.health.nodes {
		out[i] = c.health.nodes[i].view(now)
		out[i].Node = c.nodes[i].Name
	}
	return out
}

// healthView is a Client's nodeHealth per node, and the logger its changes
// go to.
type healthView struct {
	nodes  []nodeHealth
	names  []string
	logger *slog.Logger
}

// nodeHealth is one node's health. state is read without the lock, so that
// a call that finds the node as it was (the common case) only stores its
// answer time; the rest changes under mu.
type nodeHealth struct {
	state      atomic.Int32 // a HealthState
	lastAnswer atomic.Int64 // unix nanoseconds; 0: never

	mu          sync.Mutex
	downSince   time.Time
	lastErr     error
	quarantine  time.Time // until; zero: none
	incarnation string
}

// init makes the view of nodes, logging to logger.
func (h *healthView) init(nodes []*node, logger *slog.Logger) {
	h.nodes, h.names, h.logger = make([]nodeHealth, len(nodes)), make([]string, len(nodes)), logger
	for i, n := range nodes {
		h.names[i] = n.Name
	}
}

// answered is nodecall.Engine.Answered: it counts one node call's reply.
func (h *healthView) answered(caller context.Context, r nodecall.Reply) {
	if r.Shed {
		return // never sent: the client's own backlog
	}
	h.record(caller, r.Idx, r.Err)
}

// record counts node i's answer to one call: err is the call's error, nil
// when the node answered. caller is the context of the call's caller.
func (h *healthView) record(caller context.Context, i int, err error) {
	if i < 0 || i >= len(h.nodes) {
		return
	}
	n := &h.nodes[i]
	if err == nil {
		now := time.Now()
		n.lastAnswer.Store(now.UnixNano())
		if HealthState(n.state.Load()) == HealthUp {
			return
		}
		h.up(i, now)
		return
	}
	if ignoredFailure(caller, err) {
		return
	}
	h.down(i, err)
}

// ignoredFailure reports whether err says nothing of the node's health: the
// caller's context ended first, or the reply is about one key's data.
func ignoredFailure(caller context.Context, err error) bool {
	if errors.Is(err, context.Canceled) || (caller != nil && callerEnded(caller) != nil) {
		return true
	}
	r := replyRuleOf(err)
	return r != nil && r.keyOnly
}

// up marks node i as answering at now, logging its recovery.
func (h *healthView) up(i int, now time.Time) {
	n := &h.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	was := HealthState(n.state.Load())
	if was == HealthQuarantined && now.Before(n.quarantine) {
		return
	}
	if was == HealthDown {
		h.logger.Info("redlock: node answers again", "node", h.names[i], "down_for", now.Sub(n.downSince))
		n.downSince = time.Time{}
	}
	if now.Before(n.quarantine) { // set while the node was down
		n.state.Store(int32(HealthQuarantined)) // the amnesia guard logged it
		return
	}
	n.quarantine = time.Time{}
	n.state.Store(int32(HealthUp))
}

// down marks node i as failing with err, logging the change once.
func (h *healthView) down(i int, err error) {
	n := &h.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lastErr = err
	if HealthState(n.state.Load()) == HealthDown {
		return
	}
	n.downSince = time.Now()
	n.state.Store(int32(HealthDown))
	h.logger.Warn("redlock: node down", "node", h.names[i], "error", err)
}

// setQuarantine records that node i's votes do not count until until (the
// amnesia guard); a zero until ends the quarantine. The guard logs the
// change, with its reason (incarnation.go). A node that is down stays down.
func (h *healthView) setQuarantine(i int, until time.Time) {
	if i < 0 || i >= len(h.nodes) {
		return
	}
	n := &h.nodes[i]
	n.mu.Lock()
	defer n.mu.Unlock()
	was := HealthState(n.state.Load())
	n.quarantine = until
	switch {
	case !until.IsZero() && time.Now().Before(until) && was != HealthQuarantined && was != HealthDown:
		n.state.Store(int32(HealthQuarantined))
	case until.IsZero() && was == HealthQuarantined:
		n.state.Store(int32(HealthUp))
	}
}

// setIncarnation records node i's process identity (its INFO server
// run_id).
func (h *healthView) setIncarnation(i int, runID string) {
	if i < 0 || i >= len(h.nodes) {
		return
	}
	n := &h.nodes[i]
	n.mu.Lock()
	n.incarnation = runID
	n.mu.Unlock()
}

// view returns the node's health at now (its Node unset).
func (n *nodeHealth) view(now time.Time) NodeHealth {
	n.mu.Lock()
	defer n.mu.Unlock()
	v := NodeHealth{
		State:       HealthState(n.state.Load()),
		LastError:   n.lastErr,
		Incarnation: n.incarnation,
	}
	if ns := n.lastAnswer.Load(); ns != 0 {
		v.LastAnswer = time.Unix(0, ns)
	}
	if v.State == HealthDown {
		v.DownSince = n.downSince
	}
	if now.Before(n.quarantine) {
		v.QuarantinedUntil = n.quarantine
	} else if v.State == HealthQuarantined {
		v.State = HealthUp // ended; the next answer logs it
	}
	return v
}
