package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/d3b93e30/redlock"
)

// exec and elect print one line per node when its health changes, not
// each time they look; a node exec already warned of after the
// acquisition is not reported again; --no-warnings silences them.
func TestHealthReporter_OneLinePerChange(t *testing.T) {
	refused := errors.New("dial tcp 127.0.0.1:7003: connect: connection refused (password hunter2)")
	until := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	view := []redlock.NodeHealth{
		{Node: "a:1/0", State: redlock.HealthUp},
		{Node: "b:1/0", State: redlock.HealthDown, LastError: errors.New("WRONGPASS invalid")},
		{Node: "c:1/0", State: redlock.HealthDown, LastError: refused},
	}
	var out bytes.Buffer
	h := &healthReporter{
		health: func() []redlock.NodeHealth { return view },
		conns:  &nodeConns{passwords: []string{"hunter2"}},
		w:      &out, cmd: "exec",
	}
	h.check("node b:1/0: error: WRONGPASS invalid")
	h.check()
	assert.Equal(t, "redlock exec: warning: node c:1/0: down: dial tcp 127.0.0.1:7003: connect: connection refused (password REDACTED)\n", out.String())

	out.Reset()
	view[2] = redlock.NodeHealth{Node: "c:1/0", State: redlock.HealthUp, LastError: refused}
	view[0] = redlock.NodeHealth{Node: "a:1/0", State: redlock.HealthQuarantined, QuarantinedUntil: until}
	h.check()
	h.check()
	assert.Equal(t, []string{
		"redlock exec: warning: node a:1/0: quarantined until 2026-01-02T03:04:05Z (it may have lost its data: its votes do not count)",
		"redlock exec: node c:1/0: up again",
	}, strings.Split(strings.TrimSpace(out.String()), "\n"))

	out.Reset()
	quiet := &healthReporter{health: h.health, conns: h.conns, w: &out, cmd: "exec", quiet: true}
	quiet.check()
	view[1].State = redlock.HealthUp
	quiet.check()
	assert.Empty(t, out.String())
}
