package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// `redlock exec --shared` runs COMMAND as a reader: two readers run at once
// (each waits for the other's file), an exclusive run is busy meanwhile,
// with --min-hold too, and it runs once they are done.
func TestExec_Shared(t *testing.T) {
	redisserver.Require(t)
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	a, b, done := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "done")
	// Each reader creates its file, then waits (up to 20 s) for the other's
	// and for the test's "done". --wait: a reader that meets the first
	// reader's amnesia guard vouching half done is refused once, and retries.
	reader := func(mine, other string) []string {
		return []string{"exec", "--key", "cache", "--shared", "--ttl", "5s", "--wait", "5s", "--",
			"sh", "-c", `touch "$0"; i=0; while { [ ! -e "$1" ] || [ ! -e "$2" ]; } && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done; [ -e "$1" ]`, mine, other, done}
	}
	ra := startRedlock(t, bin, nodes, reader(a, b)...)
	rb := startRedlock(t, bin, nodes, reader(b, a)...)
	ra.waitFile(t, a)
	rb.waitFile(t, b)
	w := startRedlock(t, bin, nodes, "exec", "--key", "cache", "--ttl", "5s", "--", "true")
	assert.Equal(t, exitBusy, w.wait(t), "a writer is busy while readers run: %s", w.stderr.String())
	w = startRedlock(t, bin, nodes, "exec", "--key", "cache", "--ttl", "5s", "--min-hold", "1s", "--", "true")
	assert.Equal(t, exitBusy, w.wait(t), "a writer with --min-hold is busy while readers run: %s", w.stderr.String())
	require.NoError(t, os.WriteFile(done, nil, 0o600))
	assert.Equal(t, 0, ra.wait(t), "both readers ran at once: %s", ra.stderr.String())
	assert.Equal(t, 0, rb.wait(t), "both readers ran at once: %s", rb.stderr.String())
	w = startRedlock(t, bin, nodes, "exec", "--key", "cache", "--ttl", "5s", "--", "true")
	assert.Equal(t, 0, w.wait(t), w.stderr.String())

	bad := startRedlock(t, bin, nodes, "exec", "--key", "cache", "--shared", "--permits", "2", "--", "true")
	assert.Equal(t, exitUsage, bad.wait(t))
	assert.Contains(t, bad.stderr.String(), "--shared does not combine")
}
