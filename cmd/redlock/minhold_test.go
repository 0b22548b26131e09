package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// One run per cron tick across hosts whose cron fires at
// different moments (clock skew plus start-up delay), whatever the job's
// length. A "host" here is one redlock exec process; the skew is how much
// later the second one starts.

// readLog returns the lines jobs appended to path.
func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return ""
	}
	require.NoError(t, err)
	return string(b)
}

// waitLog waits until the log at path holds want, and fails the test if r
// exits first.
func waitLog(t *testing.T, r *execRun, path, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for readLog(t, path) != want {
		select {
		case <-r.done:
			t.Fatalf("redlock exited (%d) before the log held %q: %q\n%s", r.cmd.ProcessState.ExitCode(), want, readLog(t, path), r.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("log %q, want %q", readLog(t, path), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// running reports whether r has not exited yet.
func (r *execRun) running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

func TestExec_MinHold(t *testing.T) {
	bin := redlockBinary(t)
	// Every "host" runs the same line; job appends its name to the log.
	tick := func(nodes, log, name string, extra ...string) *execRun {
		args := append([]string{"exec", "--key", "tick", "--ttl", "10s", "--busy-exit", "0"}, extra...)
		args = append(args, "--", "sh", "-c", `echo "$1" >> "$0"`, log, name)
		return startRedlock(t, bin, nodes, args...)
	}

	t.Run("without --min-hold a host firing 1s later runs a short job again", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		log := filepath.Join(t.TempDir(), "log")
		a := tick(nodes, log, "A")
		require.Equal(t, 0, a.wait(t), a.stderr.String())
		time.Sleep(time.Second) // the other host's skew
		b := tick(nodes, log, "B")
		require.Equal(t, 0, b.wait(t), b.stderr.String())
		assert.Equal(t, "A\nB\n", readLog(t, log), "the problem --min-hold solves")
	})

	t.Run("a host firing 1s later finds the tick taken; after the hold the next tick runs", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		log := filepath.Join(t.TempDir(), "log")
		a := tick(nodes, log, "A", "--min-hold", "3s")
		waitLog(t, a, log, "A\n")
		time.Sleep(time.Second) // the other host's skew
		b := tick(nodes, log, "B", "--min-hold", "3s")
		assert.Equal(t, 0, b.wait(t), b.stderr.String())
		assert.Empty(t, b.stderr.String(), "busy, silently")
		assert.True(t, a.running(), "A holds the lock after its job ended")
		assert.Equal(t, "A\n", readLog(t, log), "one run for the tick")

		require.Equal(t, 0, a.wait(t), a.stderr.String())
		// The next tick, on a host starting after the hold has ended.
		c := tick(nodes, log, "C", "--min-hold", "3s")
		waitLog(t, c, log, "A\nC\n")
	})

	t.Run("a failed job holds the tick: no second run by a waiting host", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		log := filepath.Join(t.TempDir(), "log")
		a := startRedlock(t, bin, nodes, "exec", "--key", "tick", "--ttl", "10s", "--min-hold", "4s", "--",
			"sh", "-c", `echo A >> "$0"; exit 3`, log)
		waitLog(t, a, log, "A\n")
		b := tick(nodes, log, "B", "--min-hold", "4s", "--wait", "2s")
		assert.Equal(t, 0, b.wait(t), b.stderr.String())
		assert.True(t, a.running())
		assert.Equal(t, 3, a.wait(t), "the job's status")
		assert.Equal(t, "A\n", readLog(t, log))
	})

	t.Run("--release-on-failure: a failed job's tick is run by a waiting host", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		log := filepath.Join(t.TempDir(), "log")
		started := filepath.Join(t.TempDir(), "started")
		a := startRedlock(t, bin, nodes, "exec", "--key", "tick", "--ttl", "10s", "--min-hold", "4s", "--release-on-failure", "--",
			"sh", "-c", `touch "$1"; sleep 0.5; echo A >> "$0"; exit 3`, log, started)
		a.waitFile(t, started)
		b := tick(nodes, log, "B", "--min-hold", "4s", "--release-on-failure", "--wait", "3s")
		assert.Equal(t, 3, a.wait(t), a.stderr.String())
		assert.Equal(t, 0, b.wait(t), b.stderr.String())
		assert.Equal(t, "A\nB\n", readLog(t, log), "B ran the tick after A failed")
	})

	t.Run("a job longer than the period: the next tick is skipped, then runs at once", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		dir := t.TempDir()
		log, stop := filepath.Join(dir, "log"), filepath.Join(dir, "stop")
		a := startRedlock(t, bin, nodes, "exec", "--key", "tick", "--ttl", "2s", "--min-hold", "500ms", "--",
			"sh", "-c", `echo A >> "$0"; while [ ! -e "$1" ]; do sleep 0.05; done; echo A-end >> "$0"`, log, stop)
		waitLog(t, a, log, "A\n")
		time.Sleep(time.Second) // past --min-hold: the next "tick"
		b := tick(nodes, log, "B", "--min-hold", "500ms")
		assert.Equal(t, 0, b.wait(t), b.stderr.String())
		assert.Equal(t, "A\n", readLog(t, log), "skipped while A runs")

		require.NoError(t, os.WriteFile(stop, nil, 0o644))
		require.Equal(t, 0, a.wait(t), a.stderr.String())
		c := tick(nodes, log, "C", "--min-hold", "500ms")
		assert.Equal(t, 0, c.wait(t), c.stderr.String())
		assert.Equal(t, "A\nA-end\nC\n", readLog(t, log), "released when A ended, past its hold")
	})

	t.Run("a signal during the hold ends it without a release", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		log := filepath.Join(t.TempDir(), "log")
		a := tick(nodes, log, "A", "--min-hold", "60s", "-v")
		waitLog(t, a, log, "A\n")
		for !strings.Contains(a.stderr.String(), "holding the lock") {
			require.True(t, a.running(), a.stderr.String())
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, a.cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 0, a.wait(t), "the job's status: it had ended")
		assert.Contains(t, a.stderr.String(), "during --min-hold: leaving the lock to expire")
		b := tick(nodes, log, "B")
		assert.Equal(t, 0, b.wait(t), b.stderr.String())
		assert.Equal(t, "A\n", readLog(t, log), "the tick stays taken")
	})
}
