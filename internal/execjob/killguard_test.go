package execjob

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// heartbeatEnv, set to a file's path, makes this test binary a job that
// ignores SIGTERM and writes the wall-clock time (Unix nanoseconds, 8
// bytes) at the file's start every millisecond until it is killed: the
// last value is its last sign of life.
const heartbeatEnv = "EXECJOB_HEARTBEAT"

func init() {
	path := os.Getenv(heartbeatEnv)
	if path == "" {
		return
	}
	signal.Ignore(syscall.SIGTERM)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		os.Exit(2)
	}
	var b [8]byte
	for {
		binary.LittleEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
		_, _ = f.WriteAt(b[:], 0)
		time.Sleep(time.Millisecond)
	}
}

// lastLife reads a heartbeat job's last sign of life.
func lastLife(t *testing.T, path string) time.Time {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, 8, "the job wrote a heartbeat")
	return time.Unix(0, int64(binary.LittleEndian.Uint64(b)))
}

// killTrial takes a lock of the given TTL on three in-memory nodes, runs a
// heartbeat job under Supervise, loses the lock the way lose does, and
// returns how long before the lock's validity ended the job last showed a
// sign of life (negative: after it), and what Supervise returned.
func killTrial(t *testing.T, ttl, nodeTimeout time.Duration, lose func(t *testing.T, nodes []*miniredis.Miniredis)) (margin time.Duration, code int, stderr string) {
	t.Helper()
	var nodes []*miniredis.Miniredis
	var urls []string
	for range 3 {
		m := miniredis.RunT(t)
		nodes = append(nodes, m)
		urls = append(urls, "redis://"+m.Addr())
	}
	c, err := redlock.Dial(urls, redlock.WithNodeTimeout(nodeTimeout))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	lock, err := c.TryAcquire(ctx, "job", ttl)
	require.NoError(t, err)
	lease, err := lock.KeepAlive(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lease.Release(ctx) })

	beat := filepath.Join(t.TempDir(), "beat")
	self, err := os.Executable()
	require.NoError(t, err)
	g, err := Start([]string{self, "-test.run=^$"}, append(os.Environ(), heartbeatEnv+"="+beat), nil, nil)
	require.NoError(t, err)
	t.Cleanup(func() { g.Signal(syscall.SIGKILL) })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if b, err := os.ReadFile(beat); err == nil && len(b) == 8 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the heartbeat job did not start")
	}
	lose(t, nodes)
	var out bytes.Buffer
	code, _ = Supervise(ctx, g, Config{Lease: lease, Grace: time.Minute, Stderr: &out})
	return lease.ValidUntil().Sub(lastLife(t, beat)), code, out.String()
}

// killMarginTrials is how many trials of each way to lose the lock
// TestSupervise_KillGuardMargin runs: $EXECJOB_MARGIN_TRIALS, default 2.
func killMarginTrials(t *testing.T) int {
	if v := os.Getenv("EXECJOB_MARGIN_TRIALS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err)
		return n
	}
	return 2
}

// A job that ignores SIGTERM is dead before the lock's validity ends, with
// the kill guard to spare less the kill's own delay, both when an
// extension fails (SIGTERM, then SIGKILL the kill guard before the
// validity's end, however long --grace) and when an extension hangs past it
// (SIGKILL the kill guard before the validity's end, while the lease is
// still live). It logs the margins: the lock's validity deadline less the
// job's last sign of life. Before, SIGKILL came at the validity's end: the
// margin was 0 less the kill's delay, and the nodes freed the key one drift
// allowance (22 ms at a 2 s TTL) later.
func TestSupervise_KillGuardMargin(t *testing.T) {
	const ttl = time.Second
	guard := KillGuard(ttl)
	for _, tc := range []struct {
		name        string
		nodeTimeout time.Duration
		lose        func(t *testing.T, nodes []*miniredis.Miniredis)
		says        string
	}{
		{"an extension fails", 100 * time.Millisecond, func(_ *testing.T, nodes []*miniredis.Miniredis) {
			for _, m := range nodes {
				m.FlushAll() // the next extension finds no key
			}
		}, "before the lock's validity runs out"},
		{"an extension hangs past the validity", 800 * time.Millisecond, func(t *testing.T, nodes []*miniredis.Miniredis) {
			// Two nodes freeze: the extension waits its whole 800ms.
			for _, m := range nodes[1:] {
				m.Lock()
				t.Cleanup(m.Unlock)
			}
		}, "no extension has succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var margins []time.Duration
			for range killMarginTrials(t) {
				margin, code, stderr := killTrial(t, ttl, tc.nodeTimeout, tc.lose)
				assert.Equal(t, ExitLost, code, stderr)
				assert.Contains(t, stderr, tc.says)
				assert.Positive(t, margin, "the job outlived the lock's validity: %s", stderr)
				margins = append(margins, margin)
			}
			slices.Sort(margins)
			t.Logf("TTL %v, kill guard %v, %d trials: last sign of life before the validity's end: min %v, median %v, max %v",
				ttl, guard, len(margins), margins[0].Round(100*time.Microsecond), margins[len(margins)/2].Round(100*time.Microsecond), margins[len(margins)-1].Round(100*time.Microsecond))
		})
	}
}
