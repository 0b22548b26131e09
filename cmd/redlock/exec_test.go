package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// These tests run `redlock exec` and `redlock status` against real
// redis-server processes (skipped when redis-server is missing, unless
// CI=true). exec runs as the real binary (redlockBinary), so that its signal
// handling and process groups are the real ones.

// startNodes starts n redis-server nodes, closed when the test ends, and
// returns them with their node list for --nodes / $REDLOCK_NODES.
func startNodes(t *testing.T, n int) ([]*redisserver.Server, string) {
	t.Helper()
	redisserver.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	servers, err := redisserver.StartN(ctx, n, redisserver.Options{})
	require.NoError(t, err)
	addrs := make([]string, n)
	for i, s := range servers {
		t.Cleanup(func() { assert.NoError(t, s.Close()) })
		addrs[i] = "redis://" + s.Addr()
	}
	return servers, strings.Join(addrs, ",")
}

// execRun is one started `redlock` process.
type execRun struct {
	cmd            *exec.Cmd
	stdout, stderr syncBuffer // safe to read while it runs
	done           chan struct{}
	err            error // cmd.Wait's
}

func startRedlock(t *testing.T, bin, nodes string, args ...string) *execRun {
	t.Helper()
	if len(args) > 0 && args[0] == "exec" && !slices.Contains(args, "--node-timeout") {
		// The default, 1% of the TTL, is tight on a loaded machine (the
		// whole suite runs many redis-servers): a node's slow answer would
		// lose the lock, which is not what these tests are about.
		args = append([]string{"exec", "--node-timeout", "500ms"}, args[1:]...)
	}
	r := &execRun{cmd: exec.Command(bin, args...)}
	r.cmd.Env = append(os.Environ(), "REDLOCK_NODES="+nodes)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.cmd.WaitDelay = 5 * time.Second
	// A test binary that dies (a timeout) takes its redlock processes, and
	// so their jobs, with it.
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	r.done = make(chan struct{})
	require.NoError(t, r.cmd.Start())
	go func() {
		r.err = r.cmd.Wait()
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// wait returns the exit status.
func (r *execRun) wait(t *testing.T) int {
	t.Helper()
	<-r.done
	var ee *exec.ExitError
	if r.err != nil && !errors.As(r.err, &ee) {
		t.Fatalf("redlock: %v", r.err)
	}
	return r.cmd.ProcessState.ExitCode()
}

// waitFile waits until COMMAND has created path, and fails the test if
// redlock exits first.
func (r *execRun) waitFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-r.done:
			t.Fatalf("redlock exited with status %d before COMMAND created %s; stderr:\n%s", r.cmd.ProcessState.ExitCode(), path, r.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not appear", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestExec_EndToEnd(t *testing.T) {
	redisserver.Require(t)
	bin := redlockBinary(t)

	t.Run("two concurrent runs: one runs COMMAND, the other is busy", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		cmd := []string{"exec", "--key", "cron", "--ttl", "5s", "--", "sh", "-c", "echo ran; sleep 0.5; exit 3"}
		a, b := startRedlock(t, bin, nodes, cmd...), startRedlock(t, bin, nodes, cmd...)
		codes := []int{a.wait(t), b.wait(t)}
		assert.ElementsMatch(t, []int{3, exitBusy}, codes, "COMMAND's status passes through; the other is busy\nA: %s\nB: %s", a.stderr.String(), b.stderr.String())
		assert.Equal(t, "ran\n", a.stdout.String()+b.stdout.String(), "exactly one ran COMMAND")
		loser := a
		if codes[1] == exitBusy {
			loser = b
		}
		assert.Empty(t, loser.stderr.String(), "busy is silent without -v")
	})

	t.Run("with --wait the second runs after the first", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		log := filepath.Join(t.TempDir(), "log")
		cmd := []string{"exec", "--key", "cron", "--ttl", "5s", "--wait", "10s", "--fence-env", "TOKEN", "--",
			"sh", "-c", `echo "start $TOKEN" >> "$0"; sleep 0.4; echo "end $TOKEN" >> "$0"`, log}
		a, b := startRedlock(t, bin, nodes, cmd...), startRedlock(t, bin, nodes, cmd...)
		assert.Equal(t, 0, a.wait(t), a.stderr.String())
		assert.Equal(t, 0, b.wait(t), b.stderr.String())
		out, err := os.ReadFile(log)
		require.NoError(t, err)
		var t1, t2, e1, e2 uint64
		_, err = fmt.Sscanf(string(out), "start %d\nend %d\nstart %d\nend %d\n", &t1, &e1, &t2, &e2)
		require.NoError(t, err, "one after the other: %q", out)
		assert.Equal(t, t1, e1)
		assert.Equal(t, t2, e2)
		assert.Greater(t, t2, t1, "increasing fencing tokens in $TOKEN (tokens start from a node clock in µs)")
	})

	t.Run("majority killed: COMMAND is stopped, lost-lock status", func(t *testing.T) {
		t.Parallel()
		servers, nodes := startNodes(t, 3)
		dir := t.TempDir()
		started, finished := filepath.Join(dir, "started"), filepath.Join(dir, "finished")
		r := startRedlock(t, bin, nodes, "exec", "--key", "job", "--ttl", "1500ms", "--node-timeout", "200ms", "--",
			"sh", "-c", `touch "$0"; sleep 30; touch "$1"`, started, finished)
		r.waitFile(t, started)
		killed := time.Now()
		require.NoError(t, servers[0].Kill())
		require.NoError(t, servers[1].Kill())
		assert.Equal(t, exitLost, r.wait(t), r.stderr.String())
		assert.Less(t, time.Since(killed), 1500*time.Millisecond, "COMMAND stopped before the lock's TTL ran out")
		assert.NoFileExists(t, finished)
		assert.Contains(t, r.stderr.String(), "lock lost")
		assert.Contains(t, r.stderr.String(), "sending SIGTERM")
		if strings.Contains(r.stderr.String(), "extension failed") {
			assert.Contains(t, r.stderr.String(), servers[0].Addr()+"/0: unreachable: ", "each node's answer")
		}
	})

	t.Run("lost lock: SIGKILL after the grace period", func(t *testing.T) {
		t.Parallel()
		servers, nodes := startNodes(t, 3)
		dir := t.TempDir()
		started := filepath.Join(dir, "started")
		r := startRedlock(t, bin, nodes, "exec", "--key", "job", "--ttl", "900ms", "--node-timeout", "200ms", "--grace", "300ms", "--",
			"sh", "-c", `trap "" TERM; touch "$0"; sleep 30`, started)
		r.waitFile(t, started)
		killed := time.Now()
		require.NoError(t, servers[1].Kill())
		require.NoError(t, servers[2].Kill())
		assert.Equal(t, exitLost, r.wait(t), r.stderr.String())
		assert.GreaterOrEqual(t, time.Since(killed), 300*time.Millisecond)
		assert.Contains(t, r.stderr.String(), "sending SIGKILL")
	})

	t.Run("SIGINT is forwarded to COMMAND", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		started := filepath.Join(t.TempDir(), "started")
		r := startRedlock(t, bin, nodes, "exec", "--key", "job", "--",
			"sh", "-c", `trap "echo got INT; exit 5" INT; touch "$0"; while :; do sleep 0.05; done`, started)
		r.waitFile(t, started)
		require.NoError(t, r.cmd.Process.Signal(syscall.SIGINT))
		assert.Equal(t, 5, r.wait(t), r.stderr.String())
		assert.Equal(t, "got INT\n", r.stdout.String())
	})

	t.Run("COMMAND not found", func(t *testing.T) {
		t.Parallel()
		_, nodes := startNodes(t, 3)
		r := startRedlock(t, bin, nodes, "exec", "--key", "job", "--", "/nonexistent/command")
		assert.Equal(t, exitNotFound, r.wait(t))
		// The lock was released: the next run gets it at once.
		r = startRedlock(t, bin, nodes, "exec", "--key", "job", "--", "true")
		assert.Equal(t, 0, r.wait(t), r.stderr.String())
	})
}

func TestExec_Usage(t *testing.T) {
	ctx := context.Background()
	t.Setenv("REDLOCK_NODES", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no nodes", []string{"--key", "k", "--", "true"}, "no nodes"},
		{"no key", []string{"--nodes", "127.0.0.1:1", "--", "true"}, "--key is required"},
		{"no command", []string{"--nodes", "127.0.0.1:1", "--key", "k"}, "no COMMAND"},
		{"bad flag", []string{"--nodes", "127.0.0.1:1", "--bogus"}, "not defined"},
		{"bad ttl", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "0", "--", "true"}, "--ttl"},
		{"interval too long", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "1s", "--extend-every", "1s", "--", "true"}, "--extend-every 1s: redlock: invalid argument: extension interval 1s must be below the lock's validity 988ms"},
		{"bad URL", []string{"--nodes", "redis://u:hunter2@127.0.0.1:1/notadb", "--key", "k", "--", "true"}, "node 1 of 1"},
		{"same node twice", []string{"--nodes", "127.0.0.1:1,redis://127.0.0.1:1", "--key", "k", "--", "true"}, "same node"},
		{"port out of range", []string{"--nodes", "127.0.0.1:6379,127.0.0.1:99999,127.0.0.1:6380", "--key", "k", "--", "true"}, "node 2 of 3: port \"99999\" out of range"},
		{"port out of range in a URL", []string{"--nodes", "redis://:hunter2@127.0.0.1:65536", "--key", "k", "--", "true"}, "out of range"},
		{"release-on-failure alone", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--release-on-failure", "--", "true"}, "needs --min-hold"},
		{"negative min-hold", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--min-hold", "-1s", "--", "true"}, "--min-hold"},
		// A TTL shorter than the clock-drift allowance gives no validity:
		// the message names --ttl, not the --extend-every the user never
		// gave, and gives the library's reason.
		{"ttl without validity", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "1ms", "--", "true"}, "--ttl 1ms: redlock: invalid argument: ttl 1ms leaves no validity"},
		{"ttl at the drift allowance", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "2ms", "--", "true"}, "--ttl 2ms: redlock: invalid argument: ttl 2ms leaves no validity"},
		{"ttl without validity after the node timeout", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "100ms", "--node-timeout", "99ms", "--", "true"}, "smallest usable ttl"},
		{"ttl in fractions of a millisecond", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "1500us", "--", "true"}, "--ttl 1.5ms: redlock: invalid argument: ttl 1.5ms is not a whole number of milliseconds"},
		{"ttl beyond the retention", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "25h", "--", "true"}, "--ttl 25h0m0s: redlock: invalid argument: ttl 25h0m0s is longer than the retention"},
		{"quarantine beyond the retention", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--quarantine", "25h", "--", "true"}, "--quarantine 25h0m0s: redlock: invalid argument: retention 24h0m0s is shorter than the quarantine"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantUsageError(t, tc.want, append([]string{"exec"}, tc.args...)...) })
	}
	t.Run("help", func(t *testing.T) {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 0, runExec(ctx, []string{"--help"}, &stdout, &stderr))
		assert.Contains(t, stdout.String(), "Example:")
		assert.Contains(t, stdout.String(), "Exit status:")
		assert.Contains(t, stdout.String(), "-fence-env")
		assert.Empty(t, stderr.String())
	})
}

func TestStatus_Usage(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no nodes", []string{"--key", "k"}, "no nodes"},
		{"no key", []string{"--nodes", "127.0.0.1:1"}, "--key is required"},
		{"zero timeout", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--timeout", "0"}, "--timeout"},
		{"negative quarantine", []string{"--nodes", "127.0.0.1:1", "--key", "k", "--quarantine", "-1s"}, "--quarantine"},
		{"extra arguments", []string{"--nodes", "127.0.0.1:1", "--key", "k", "more"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantUsageError(t, tc.want, append([]string{"status"}, tc.args...)...) })
	}
}

func TestExec_UnavailableNodes(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	require.NoError(t, servers[0].Kill())
	require.NoError(t, servers[1].Kill())
	var stdout, stderr bytes.Buffer
	code := runExec(context.Background(), []string{"--nodes", nodes, "--key", "k", "--", "true"}, &stdout, &stderr)
	assert.Equal(t, exitUnavailable, code, stderr.String())
}

// A holder on 5 nodes, 3 of them down: the survivors say "taken", but no
// majority answered, so exec reports the outage (69, with what each node
// answered), not a busy lock (75). Killed nodes refuse at once; stopped
// ones (SIGSTOP) answer nothing, so the survivors' "taken" is in before the
// vote gives up on them at the per-node timeout.
func TestExec_MajorityDownIsUnavailableNotBusy(t *testing.T) {
	for _, down := range []string{"killed", "stopped"} {
		t.Run(down, func(t *testing.T) {
			servers, nodes := startNodes(t, 5)
			ctx := context.Background()
			urls, err := redlock.ParseNodes(nodes)
			require.NoError(t, err)
			holder, err := redlock.Dial(urls)
			require.NoError(t, err)
			defer holder.Close()
			l, err := holder.Acquire(ctx, "k", time.Minute)
			require.NoError(t, err)
			time.Sleep(50 * time.Millisecond) // the stragglers' SETs
			for _, s := range servers[:3] {
				if down == "killed" {
					require.NoError(t, s.Kill())
				} else {
					require.NoError(t, s.Stop())
				}
			}
			var stdout, stderr bytes.Buffer
			code := runExec(ctx, []string{"--nodes", nodes, "--key", "k", "--", "true"}, &stdout, &stderr)
			assert.Equal(t, exitUnavailable, code, stderr.String())
			assert.Contains(t, stderr.String(), "too few nodes answered")
			assert.Positive(t, l.Validity())
		})
	}
}

func TestStatus(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	ctx := context.Background()
	status := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := runStatus(ctx, append([]string{"--nodes", nodes}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	// statusUntil runs status until its output shows what the calls an
	// acquisition did not wait for (a straggler's SET, the vouching) must
	// lead to, for at most 10 s, and returns the last output.
	statusUntil := func(settled func(out string) bool, args ...string) (int, string) {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, out, _ := status(args...)
			if settled(out) || time.Now().After(deadline) {
				return code, out
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	code, out, _ := status("--key", "job")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, `key "job": free on all 3 nodes`)

	urls, err := redlock.ParseNodes(nodes)
	require.NoError(t, err)
	rl, err := redlock.Dial(urls, redlock.WithoutAmnesiaGuard())
	require.NoError(t, err)
	defer rl.Close()
	l, err := rl.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	heldBy := `held by ` + l.Owner()[:6] + `… on 3 of 3 nodes (quorum 2)`
	// The straggler's SET and the fencing write-back land in the background.
	code, out = statusUntil(func(out string) bool { return strings.Contains(out, heldBy) }, "--key", "job")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, heldBy)
	assert.NotContains(t, out, l.Owner(), "only a prefix of the owner value")
	assert.Contains(t, out, "no epoch", "acquired without the amnesia guard")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5)
	assert.Regexp(t, `^NODE\s+HEALTH\s+HELD\s+OWNER\s+TTL\s+FENCE\s+QUARANTINE\s+ERROR$`, lines[1])
	assert.Regexp(t, `^127\.0\.0\.1:\d+/0\s+up\s+yes\s+\S{6}…\s+(59\.\d+|1m0)s?\s+\d+\s`, lines[2])

	guarded, err := redlock.Dial(urls) // the guard is on by default
	require.NoError(t, err)
	defer guarded.Close()
	g, err := guarded.Acquire(ctx, "guarded", time.Minute)
	require.NoError(t, err)
	// The vouching comes 10 ms after the acquisition.
	_, gout := statusUntil(func(out string) bool { return strings.Count(out, " trusted ") == 3 }, "--key", "guarded")
	assert.Equal(t, 3, strings.Count(gout, " trusted "), gout)
	require.NoError(t, g.Release(ctx))

	code, out, _ = status("--key", "job", "--json")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, `"held": true`)
	assert.Contains(t, out, `"ttl_ms": `)

	// A killed node refuses at once: the timeout is for the live ones, and
	// leaves room for a loaded machine.
	require.NoError(t, servers[2].Kill())
	code, out, _ = status("--key", "job", "--timeout", "2s")
	assert.Equal(t, 0, code, "a quorum answered")
	assert.Contains(t, out, "1 of 3 nodes did not answer")
	assert.Contains(t, out, "connection refused")
	assert.Regexp(t, servers[2].Addr()+`/0\s+down since \d\d:\d\d:\d\d\s`, out, "the node's health")

	require.NoError(t, l.Release(ctx))
	require.NoError(t, servers[1].Kill())
	code, out, _ = status("--key", "job", "--timeout", "2s")
	assert.Equal(t, exitUnavailable, code, out)

	code, _, errOut := status()
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "--key is required")
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, runStatus(ctx, []string{"-h"}, &stdout, &stderr))
	assert.Contains(t, stdout.String(), "Example:")
}

// --help goes to stdout for every subcommand, and there is a
// --version.
func TestHelpAndVersion(t *testing.T) {
	ctx := context.Background()
	for _, args := range [][]string{{"--help"}, {"exec", "--help"}, {"status", "--help"}, {"exec", "-h"}, {"status", "-h"}, {"chaos", "--help"}, {"chaos", "--nodes", "3", "-h"}} {
		var stdout, stderr bytes.Buffer
		assert.Equal(t, 0, run(ctx, args, &stdout, &stderr), args)
		assert.Contains(t, stdout.String(), "Usage", args)
		assert.Empty(t, stderr.String(), args)
	}
	var stdout, stderr bytes.Buffer
	assert.Equal(t, 0, run(ctx, []string{"--version"}, &stdout, &stderr))
	assert.Regexp(t, `^redlock \S`, stdout.String())
	assert.Empty(t, stderr.String())

	bin := redlockBinary(t)
	out, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	assert.Regexp(t, `^redlock \S`, string(out))
}
