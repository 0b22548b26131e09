package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/d3b93e30/redlock"
)

// healthEvery is how often exec and elect look at the Client's health view
// (redlock.Client.Health: no node call of its own) while the job runs.
const healthEvery = time.Second

// healthReporter prints one stderr line per node when the Client's health
// view says it went down or into quarantine, and one when it is up again:
// not per failed call. Lines about a failing node are warnings, which
// --no-warnings silences (quiet), with the recoveries.
type healthReporter struct {
	health func() []redlock.NodeHealth
	conns  *nodeConns // for the words a node's error is shown in
	w      io.Writer
	cmd    string // "exec", "elect"
	quiet  bool

	mu   sync.Mutex
	last []redlock.HealthState // by node; nil until the first check
}

// check compares the health view with the last one and prints each change
// of a node to or from down or quarantined. warned names the nodes already
// reported down by another line (exec's warnings after the acquisition): on
// the first check they are not reported again.
func (h *healthReporter) check(warned ...string) {
	nodes := h.health()
	h.mu.Lock()
	defer h.mu.Unlock()
	first := h.last == nil
	if first {
		h.last = make([]redlock.HealthState, len(nodes))
	}
	for i, n := range nodes {
		was := h.last[i]
		h.last[i] = n.State
		if n.State == was || h.quiet {
			continue
		}
		if line := h.line(n, was); line != "" && !(first && mentioned(warned, n.Node)) {
			fmt.Fprintln(h.w, line)
		}
	}
}

// line describes node n's change from was, "" when it is not worth a line
// (a node seen up for the first time).
func (h *healthReporter) line(n redlock.NodeHealth, was redlock.HealthState) string {
	switch n.State {
	case redlock.HealthDown:
		msg := "down"
		if n.LastError != nil {
			msg += ": " + h.conns.redact(nodeError(n.LastError))
		}
		return fmt.Sprintf("redlock %s: warning: node %s: %s", h.cmd, n.Node, msg)
	case redlock.HealthQuarantined:
		return fmt.Sprintf("redlock %s: warning: node %s: quarantined until %s (it may have lost its data: its votes do not count)", h.cmd, n.Node, n.QuarantinedUntil.Format(time.RFC3339))
	case redlock.HealthUp:
		if was == redlock.HealthDown || was == redlock.HealthQuarantined {
			return fmt.Sprintf("redlock %s: node %s: up again", h.cmd, n.Node)
		}
	}
	return ""
}

// mentioned reports whether one of lines is about node ("node NAME: ...").
func mentioned(lines []string, node string) bool {
	for _, l := range lines {
		if strings.Contains(l, "node "+node+": ") {
			return true
		}
	}
	return false
}

// watch checks every healthEvery until the returned stop is called; stop
// returns once the watching goroutine has ended.
func (h *healthReporter) watch() (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(healthEvery)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				h.check()
			}
		}
	}()
	return func() { close(quit); <-done }
}

// healthText is a node's health as status shows it: "up", "down since
// 15:04:05", "quarantined until 15:04:05", "unknown".
func healthText(n redlock.NodeHealth) string {
	switch n.State {
	case redlock.HealthDown:
		return "down since " + n.DownSince.Format(time.TimeOnly)
	case redlock.HealthQuarantined:
		return "quarantined until " + n.QuarantinedUntil.Format(time.TimeOnly)
	}
	return n.State.String()
}
