package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// processGone reports whether pid has exited (no such process, or a zombie
// waiting for its new parent to reap it).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) S ...: the state follows the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z'
}

// waitGone waits up to d for every pid to be gone and returns those still
// alive.
func waitGone(pids []int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		var alive []int
		for _, p := range pids {
			if !processGone(p) {
				alive = append(alive, p)
			}
		}
		if len(alive) == 0 || time.Now().After(deadline) {
			return alive
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readPids reads the pids a job wrote, one a line.
func readPids(t *testing.T, path string) []int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		p, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, p)
	}
	require.NotEmpty(t, pids)
	return pids
}

// jobWithChild is a job script that starts a background child, writes its
// own pid and the child's to $1, creates $2, then runs for ever, appending
// a line to $3 every 50 ms. Extra shell lines go before the loop.
func jobWithChild(extra string) string {
	return extra + `
sleep 300 &
echo $! > "$1"; echo $$ >> "$1"
touch "$2"
while :; do echo A >> "$3"; sleep 0.05; done`
}

// SIGKILL to redlock exec kills the job's whole process group at
// once, and a second exec then runs alone.
func TestExec_RedlockKilledTakesTheJobWithIt(t *testing.T) {
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	pidsFile, started, log := filepath.Join(dir, "pids"), filepath.Join(dir, "started"), filepath.Join(dir, "log")
	a := startRedlock(t, bin, nodes, "exec", "--key", "killed", "--ttl", "2s", "--node-timeout", "300ms", "--",
		"sh", "-c", jobWithChild(""), "job", pidsFile, started, log)
	a.waitFile(t, started)
	pids := readPids(t, pidsFile)

	require.NoError(t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.done
	assert.Empty(t, waitGone(pids, time.Second), "the job and its child must die with redlock")

	b := startRedlock(t, bin, nodes, "exec", "--key", "killed", "--ttl", "2s", "--node-timeout", "300ms", "--wait", "20s", "--",
		"sh", "-c", `echo B-start >> "$0"; sleep 0.3; echo B-end >> "$0"`, log)
	require.Equal(t, 0, b.wait(t), b.stderr.String())
	out, err := os.ReadFile(log)
	require.NoError(t, err)
	_, afterB, ok := strings.Cut(string(out), "B-start\n")
	require.True(t, ok, string(out))
	assert.Equal(t, "B-end\n", afterB, "nothing of the first job ran while the second held the lock")
}

// Each signal a supervisor sends is forwarded to the
// job; a job that ignores it is killed, with its group, --grace later, the
// lock is released, and redlock exits 128+N.
func TestExec_SignalsReachTheJob(t *testing.T) {
	bin := redlockBinary(t)
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM} {
		name := strings.TrimPrefix(unixSignalName(sig), "SIG")
		t.Run(name+" handled by the job", func(t *testing.T) {
			t.Parallel()
			_, nodes := startNodes(t, 3)
			started := filepath.Join(t.TempDir(), "started")
			r := startRedlock(t, bin, nodes, "exec", "--key", "sig", "--",
				"sh", "-c", `trap "echo got `+name+`; exit 5" `+name+`; touch "$0"; while :; do sleep 0.05; done`, started)
			r.waitFile(t, started)
			require.NoError(t, r.cmd.Process.Signal(sig))
			assert.Equal(t, 5, r.wait(t), r.stderr.String())
			assert.Equal(t, "got "+name+"\n", r.stdout.String())
		})
		t.Run(name+" ignored by the job", func(t *testing.T) {
			t.Parallel()
			_, nodes := startNodes(t, 3)
			dir := t.TempDir()
			pidsFile, started, log := filepath.Join(dir, "pids"), filepath.Join(dir, "started"), filepath.Join(dir, "log")
			r := startRedlock(t, bin, nodes, "exec", "--key", "sig", "--ttl", "30s", "--grace", "300ms", "--",
				"sh", "-c", jobWithChild(`trap "" `+name), "job", pidsFile, started, log)
			r.waitFile(t, started)
			pids := readPids(t, pidsFile)
			require.NoError(t, r.cmd.Process.Signal(sig))
			assert.Equal(t, 128+int(sig), r.wait(t), r.stderr.String())
			assert.Contains(t, r.stderr.String(), "sending SIGKILL")
			assert.Empty(t, waitGone(pids, time.Second), "the job's group was killed")
			// Released: the next run takes the lock at once (the TTL is 30 s).
			next := startRedlock(t, bin, nodes, "exec", "--key", "sig", "--", "true")
			assert.Equal(t, 0, next.wait(t), next.stderr.String())
		})
	}
}

func unixSignalName(s syscall.Signal) string {
	switch s {
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGQUIT:
		return "SIGQUIT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// What a job leaves running in its group when it exits does not run on
// without the lock.
func TestExec_LeftoversAreKilled(t *testing.T) {
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	pidFile := filepath.Join(t.TempDir(), "pid")
	r := startRedlock(t, bin, nodes, "exec", "--key", "left", "--",
		"sh", "-c", `sleep 300 > /dev/null 2>&1 & echo $! > "$0"; exit 4`, pidFile)
	assert.Equal(t, 4, r.wait(t), r.stderr.String())
	assert.Empty(t, waitGone(readPids(t, pidFile), time.Second))
}

// The job watchdog is redlock itself; an in-process runExec (the test binary
// as the watchdog) runs a job too.
func TestExec_InProcess(t *testing.T) {
	_, nodes := startNodes(t, 3)
	var stdout, stderr syncBuffer
	code := runExec(context.Background(), []string{"--nodes", nodes, "--key", "inproc", "--node-timeout", "1s", "-v", "--", "sh", "-c", "exit 75"}, &stdout, &stderr)
	assert.Equal(t, 75, code)
	assert.Contains(t, stderr.String(), "redlock exec: COMMAND exited with status 75", "-v tells a job's own 75 from busy")
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of runExec
// and the copying of its job's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A job that ignores SIGTERM after the lock was lost is killed when the
// lock's validity runs out, even when --grace is longer: a host that takes
// the lock once the keys have expired never runs beside it.
func TestExec_LostLockKillsTheJobByTheValidityEnd(t *testing.T) {
	bin := redlockBinary(t)
	servers, nodes := startNodes(t, 3)
	dir := t.TempDir()
	pidsFile, started, log := filepath.Join(dir, "pids"), filepath.Join(dir, "started"), filepath.Join(dir, "log")
	a := startRedlock(t, bin, nodes, "exec", "--key", "lost", "--ttl", "2s", "--node-timeout", "200ms", "--grace", "20s", "--",
		"sh", "-c", jobWithChild(`trap "" TERM`), "job", pidsFile, started, log)
	a.waitFile(t, started)
	pids := readPids(t, pidsFile)

	// A majority stops answering: the next extension fails.
	require.NoError(t, servers[1].Stop())
	require.NoError(t, servers[2].Stop())
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(a.stderr.String(), "sending SIGTERM") {
		require.True(t, time.Now().Before(deadline), "the lock was not lost: %s", a.stderr.String())
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, servers[1].Cont())
	require.NoError(t, servers[2].Cont())

	// Another host waits for the lock and runs as soon as it gets it.
	b := startRedlock(t, bin, nodes, "exec", "--key", "lost", "--ttl", "2s", "--wait", "30s", "--",
		"sh", "-c", `echo B >> "$0"`, log)
	assert.Equal(t, 0, b.wait(t), b.stderr.String())
	assert.Equal(t, exitLost, a.wait(t), a.stderr.String())
	assert.Empty(t, waitGone(pids, time.Second))

	lines := strings.Fields(readLog(t, log))
	require.Contains(t, lines, "B")
	assert.Equal(t, "B", lines[len(lines)-1], "the job without the lock ran after the next holder started")
	assert.Contains(t, a.stderr.String(), "validity")
}
