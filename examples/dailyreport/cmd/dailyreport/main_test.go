package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

// After failed dials (TestRunUnreachableNodes) a go-redis pool re-dials
// every second from a goroutine of its own until it sees the pool closed, so
// that goroutine can outlive Client.Close by up to a second: go-redis's, not
// a leak of ours.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

func TestRunEmbeddedNodes(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--rounds", "2"}, &out, &errOut)
	assert.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
	assert.Contains(t, out.String(), "OK: every report built exactly once in each of 2 round(s)")
	for _, c := range clients {
		assert.Equal(t, 2, strings.Count(out.String(), "  "+c+" "), "client %s: one line per round", c)
	}
	assert.NotContains(t, out.String(), "FAIL")
	assert.Empty(t, errOut.String())
}

func TestRunBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--rounds", "0"}, {"--bogus"}, {"extra"}, {"--nodes", " , "}, {"--nodes", "http://[::1"}} {
		var out, errOut bytes.Buffer
		assert.Equal(t, 2, run(args, &out, &errOut), "args %q", args)
		assert.NotEmpty(t, errOut.String(), "args %q", args)
	}
}

func TestRunUnreachableNodes(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--nodes", "127.0.0.1:1,127.0.0.1:2,127.0.0.1:3"}, &out, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "cannot lock on the nodes")
	assert.Contains(t, errOut.String(), "unreachable")
}
