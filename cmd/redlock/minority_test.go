package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A paused node (SIGSTOP: it accepts connections and never answers) in a
// minority never stalls `redlock exec`: the CLI's own requests (INFO server
// at first contact, the holder record) run beside the lock's vote and the
// job, so COMMAND starts once a majority has answered. Before, the job
// started one CLI timeout (1 s) per request late: with --ttl 500ms it was
// killed before it ran (exit 79).
func TestExec_PausedMinorityNeverStallsTheJob(t *testing.T) {
	bin := redlockBinary(t)

	t.Run("ttl 500ms, the default node timeout", func(t *testing.T) {
		t.Parallel()
		servers, nodes := startNodes(t, 3)
		require.NoError(t, servers[2].Stop())
		t.Cleanup(func() { _ = servers[2].Cont() })
		marker := filepath.Join(t.TempDir(), "ran")
		// --node-timeout 0s is the default (startRedlock would give
		// another): 100ms for this TTL; --wait retries an attempt that a
		// loaded machine made miss it.
		r := startRedlock(t, bin, nodes, "exec", "--key", "paused", "--ttl", "500ms", "--node-timeout", "0s", "--wait", "5s", "--",
			"sh", "-c", `touch "$0"`, marker)
		assert.Equal(t, 0, r.wait(t), r.stderr.String())
		assert.FileExists(t, marker, "COMMAND ran")
		assert.Contains(t, r.stderr.String(), "warning: node "+servers[2].Addr()+"/0: timed-out", "the paused node is still reported")
	})

	t.Run("the job starts while the paused node has not answered", func(t *testing.T) {
		t.Parallel()
		servers, nodes := startNodes(t, 3)
		require.NoError(t, servers[2].Stop())
		t.Cleanup(func() { _ = servers[2].Cont() })
		dir := t.TempDir()
		started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
		// A per-node timeout of 30 s: any wait for the paused node's
		// answer would hold COMMAND back for 30 s, far past waitFile's
		// 10 s.
		r := startRedlock(t, bin, nodes, "exec", "--key", "paused", "--ttl", "90s", "--node-timeout", "30s", "--",
			"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.02; done`, started, stop)
		r.waitFile(t, started)
		// The node never answered: COMMAND did not wait for it.
		require.NoError(t, servers[2].Cont())
		require.NoError(t, os.WriteFile(stop, nil, 0o644))
		assert.Equal(t, 0, r.wait(t), r.stderr.String())
	})
}

// elect, too, starts COMMAND once a majority elected it.
func TestElect_PausedMinorityNeverStallsTheJob(t *testing.T) {
	bin := redlockBinary(t)
	servers, nodes := startNodes(t, 3)
	require.NoError(t, servers[2].Stop())
	t.Cleanup(func() { _ = servers[2].Cont() })
	dir := t.TempDir()
	started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	r := startRedlock(t, bin, nodes, "elect", "--name", "paused", "--ttl", "90s", "--node-timeout", "30s", "--",
		"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.02; done`, started, stop)
	r.waitFile(t, started)
	require.NoError(t, servers[2].Cont())
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	assert.Equal(t, 0, r.wait(t), r.stderr.String())
}
