package execjob

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// lease takes a lock on three in-memory nodes and keeps it alive; flush
// deletes every key on them, so that the next extension fails.
func lease(t *testing.T) (l *redlock.Lease, flush func()) {
	t.Helper()
	var nodes []*miniredis.Miniredis
	var urls []string
	for range 3 {
		m := miniredis.RunT(t)
		nodes = append(nodes, m)
		urls = append(urls, "redis://"+m.Addr())
	}
	c, err := redlock.Dial(urls)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	lock, err := c.TryAcquire(context.Background(), "job", 3*time.Second)
	require.NoError(t, err)
	l, err = lock.KeepAlive(context.Background(), redlock.WithExtendInterval(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return l, func() {
		for _, m := range nodes {
			m.FlushAll()
		}
	}
}

func start(t *testing.T, script string) *Group {
	t.Helper()
	g, err := Start([]string{"sh", "-c", script}, nil, nil, nil)
	require.NoError(t, err)
	return g
}

// A job that exits on its own with the lock held throughout returns its own
// status, and held.
func TestSupervise_JobExitsHoldingTheLock(t *testing.T) {
	l, _ := lease(t)
	var stderr bytes.Buffer
	code, held := Supervise(context.Background(), start(t, "exit 3"), Config{Lease: l, Grace: time.Second, Stderr: &stderr})
	assert.Equal(t, 3, code)
	assert.True(t, held)
	assert.Empty(t, stderr.String())
}

// When the lock is lost, the job's process group gets SIGTERM and Supervise
// returns ExitLost. The job would otherwise sleep a minute; the context
// bounds a broken Supervise, whose SIGTERM would then say so.
func TestSupervise_LostLockStopsTheJob(t *testing.T) {
	l, flush := lease(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g := start(t, "sleep 60; exit 0")
	flush()
	var stderr bytes.Buffer
	code, held := Supervise(ctx, g, Config{Lease: l, Grace: 10 * time.Second, Stderr: &stderr})
	assert.Equal(t, ExitLost, code)
	assert.False(t, held)
	assert.ErrorIs(t, l.Err(), redlock.ErrLockLost)
	assert.NoError(t, ctx.Err(), "the job was not stopped when the lock was lost")
	assert.Contains(t, stderr.String(), "sending SIGTERM to COMMAND")
	assert.Contains(t, stderr.String(), "COMMAND stopped with status 143 after the lock was lost")
}

// The exec-ignores-loss mutant leaves the job running: it ends on its own,
// after the lock was lost.
func TestSupervise_MutantIgnoresLoss(t *testing.T) {
	l, flush := lease(t)
	g := start(t, "sleep 1")
	flush()
	var stderr bytes.Buffer
	code, _ := Supervise(context.Background(), g, Config{Lease: l, Grace: 10 * time.Second, Stderr: &stderr,
		Mutant: &mutation.Knobs{ExecIgnoresLoss: true}})
	assert.Equal(t, ExitLost, code)
	assert.NotContains(t, stderr.String(), "SIGTERM")
	assert.Contains(t, stderr.String(), "COMMAND stopped with status 0 after the lock was lost")
}

// Signal reaches the whole group: the leader's child dies too.
func TestGroup_SignalReachesTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child")
	g := start(t, "sleep 60 & echo $! > "+pidFile+"; wait")
	var child int
	require.Eventually(t, func() bool {
		b, err := os.ReadFile(pidFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && child > 0
	}, 10*time.Second, 10*time.Millisecond)
	g.Signal(syscall.SIGTERM)
	st := <-g.Done()
	assert.Equal(t, 128+int(syscall.SIGTERM), st.Code)
	// The child is gone, or a zombie waiting for its new parent.
	assert.Eventually(t, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		return err != nil || strings.Contains(string(b), ") Z ")
	}, 10*time.Second, 10*time.Millisecond, "the leader's child outlived SIGTERM to the group")
	g.Signal(syscall.SIGTERM) // reaped: a no-op
}

func TestStart_NoCommand(t *testing.T) {
	_, err := Start(nil, nil, nil, nil)
	assert.Error(t, err)
}
