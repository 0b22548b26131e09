package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// electJob appends "<term> <identity>" to $OUT when it starts, then runs
// until SIGTERM, which it answers by exiting 0.
const electJob = `echo "$REDLOCK_TERM $REDLOCK_IDENTITY" >> "$OUT"; trap 'exit 0' TERM; while :; do sleep 0.02; done`

// starts reads the job starts recorded in out: one "term identity" per line.
func starts(t *testing.T, out string) [][2]string {
	t.Helper()
	b, err := os.ReadFile(out)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var s [][2]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			s = append(s, [2]string{f[0], f[1]})
		}
	}
	return s
}

// waitStarts waits until out records n job starts.
func waitStarts(t *testing.T, out string, n int) [][2]string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if s := starts(t, out); len(s) >= n {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d job starts recorded, want %d: %v", len(starts(t, out)), n, starts(t, out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Two replicas: only the leader runs COMMAND, with its term and identity;
// SIGTERM to the leader is forwarded, COMMAND exits 0, redlock resigns and
// exits 0, and the other replica is elected at once with a higher term.
func TestElect_OneLeaderAndHandOff(t *testing.T) {
	redisserver.Require(t)
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	out := filepath.Join(t.TempDir(), "starts")
	t.Setenv("OUT", out)
	args := func(id string) []string {
		return []string{"elect", "--name", "svc", "--identity", id, "--ttl", "30s", "--node-timeout", "500ms", "--", "sh", "-c", electJob}
	}
	a := startRedlock(t, bin, nodes, args("a")...)
	first := waitStarts(t, out, 1)
	require.Equal(t, "a", first[0][1])
	b := startRedlock(t, bin, nodes, args("b")...)
	time.Sleep(300 * time.Millisecond)
	require.Len(t, starts(t, out), 1, "b waits while a leads")

	resigned := time.Now()
	require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, a.wait(t), "COMMAND's status; stderr:\n%s", a.stderr.String())
	both := waitStarts(t, out, 2)
	// The TTL is 30 s: b was woken by the resign, not by the key's expiry.
	assert.Less(t, time.Since(resigned), 10*time.Second)
	assert.Equal(t, "b", both[1][1])
	ta, _ := strconv.ParseUint(both[0][0], 10, 64)
	tb, _ := strconv.ParseUint(both[1][0], 10, 64)
	assert.Greater(t, tb, ta, "terms increase")

	require.NoError(t, b.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, b.wait(t), "stderr:\n%s", b.stderr.String())
}

// Losing leadership stops COMMAND and redlock campaigns again instead of
// exiting: another owner takes the election's key on every node, the
// leader's extension fails, COMMAND gets SIGTERM; once the key is free,
// COMMAND starts again with a higher term.
func TestElect_LossStopsCommandAndCampaignsAgain(t *testing.T) {
	redisserver.Require(t)
	bin := redlockBinary(t)
	servers, nodes := startNodes(t, 3)
	out := filepath.Join(t.TempDir(), "starts")
	t.Setenv("OUT", out)
	r := startRedlock(t, bin, nodes, "elect", "--name", "svc", "--identity", "a", "--ttl", "1500ms", "--node-timeout", "300ms", "--", "sh", "-c", electJob)
	first := waitStarts(t, out, 1)

	ctx := context.Background()
	key := redlock.ElectionKey("svc")
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true})
		require.NoError(t, c.Set(ctx, key, "intruder#x", time.Second).Err())
		require.NoError(t, c.Close())
	}
	again := waitStarts(t, out, 2)
	assert.Equal(t, "a", again[1][1])
	t1, _ := strconv.ParseUint(first[0][0], 10, 64)
	t2, _ := strconv.ParseUint(again[1][0], 10, 64)
	assert.Greater(t, t2, t1, "a new term")
	assert.Contains(t, r.stderr.String(), "lost; campaigning again")
	select {
	case <-r.done:
		t.Fatalf("redlock elect exited on a loss: %s", r.stderr.String())
	default:
	}
	require.NoError(t, r.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 0, r.wait(t), "stderr:\n%s", r.stderr.String())
}

// A majority of misconfigured nodes ends elect at once with 69 (the
// nodes), not 70 (an internal error), saying what to fix.
func TestElect_MisconfiguredNodesExitUnavailable(t *testing.T) {
	servers, _ := startNodes(t, 3)
	requirePass(t, servers[0], "hunter2-secret")
	requirePass(t, servers[1], "hunter2-secret")
	nodes := strings.Join([]string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, ",")
	var stdout, stderr bytes.Buffer
	code := runElect(context.Background(), []string{"--nodes", nodes, "--name", "misconfigured", "--", "true"}, &stdout, &stderr)
	assert.Equal(t, exitUnavailable, code, stderr.String())
	assert.Contains(t, stderr.String(), "requires a password: set it in the URL")
	assert.NotContains(t, stderr.String(), "hunter2-secret")
}

func TestElect_Usage(t *testing.T) {
	for _, args := range [][]string{
		{"elect", "--nodes", "localhost:1", "--", "true"},
		{"elect", "--nodes", "localhost:1", "--name", "x"},
		{"elect", "--name", "x", "--", "true"},
		{"elect", "--nodes", "localhost:1", "--name", "x", "--ttl", "1ms", "--", "true"},
		{"elect", "--nodes", "localhost:1", "--name", "x", "--term-env", "", "--", "true"},
	} {
		t.Setenv(nodesEnv, "")
		code, _, stderr := runCLI(t, args...)
		assert.Equal(t, exitUsage, code, "%v: %s", args, stderr)
	}
	code, stdout, _ := runCLI(t, "elect", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, stdout, "Exit status:")
}
