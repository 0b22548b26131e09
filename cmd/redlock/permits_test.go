package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// With --permits 2, two hosts run COMMAND at once and a third is busy
// while they do; once they end, the third gets a permit.
func TestExec_Permits(t *testing.T) {
	redisserver.Require(t)
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	job := func(name string) []string {
		started, stop := filepath.Join(dir, name), filepath.Join(dir, "stop")
		// COMMAND marks that it runs, then runs until the test says stop.
		return []string{"exec", "--key", "api", "--permits", "2", "--ttl", "5s", "--wait", "10s", "--fence-env", "TOKEN", "--",
			"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.02; done`, started, stop}
	}
	a, b := startRedlock(t, bin, nodes, job("a")...), startRedlock(t, bin, nodes, job("b")...)
	a.waitFile(t, filepath.Join(dir, "a"))
	b.waitFile(t, filepath.Join(dir, "b")) // both run at once

	c := startRedlock(t, bin, nodes, "exec", "--key", "api", "--permits", "2", "--ttl", "5s", "--", "true")
	assert.Equal(t, exitBusy, c.wait(t), "a third host is busy while two hold the permits: %s", c.stderr.String())

	require.NoError(t, os.WriteFile(filepath.Join(dir, "stop"), nil, 0o600))
	assert.Equal(t, 0, a.wait(t), a.stderr.String())
	assert.Equal(t, 0, b.wait(t), b.stderr.String())
	c = startRedlock(t, bin, nodes, "exec", "--key", "api", "--permits", "2", "--ttl", "5s", "--", "true")
	assert.Equal(t, 0, c.wait(t), c.stderr.String())
}

func TestExec_PermitsUsage(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	for _, p := range []string{"0", "-1", "1025"} {
		wantUsageError(t, "--permits "+p+" must be in 1..1024", "exec", "--nodes", "127.0.0.1:1", "--key", "k", "--permits", p, "--", "true")
	}
}
