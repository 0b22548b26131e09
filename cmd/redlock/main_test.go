package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The end-to-end tests run the real redlock binary, built once (the first
// time a test asks for it) into a directory that TestMain removes.

func init() {
	// In-process runExec starts its job watchdog by re-executing this test
	// binary (os.Executable): run the watchdog then, not the tests.
	if len(os.Args) > 1 && os.Args[1] == watchdogArg {
		os.Exit(runWatchdog(os.Args[2:]))
	}
}

var build struct {
	once sync.Once
	dir  string
	bin  string
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		_ = os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// redlockBinary returns the path of the redlock command built from this
// package.
func redlockBinary(t *testing.T) string {
	t.Helper()
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "redlock-bin-")
		if build.err != nil {
			return
		}
		build.bin = filepath.Join(build.dir, "redlock")
		cmd := exec.Command("go", "build", "-o", build.bin, ".")
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		build.err = cmd.Run()
		build.out = out.Bytes()
	})
	if build.err != nil {
		t.Fatalf("go build ./cmd/redlock: %v\n%s", build.err, build.out)
	}
	return build.bin
}

// runCLI runs `redlock args...` in process and returns its exit status and
// what it printed.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// wantUsageError runs `redlock args...` and checks that it exits with
// exitUsage, says want on stderr without showing the password "hunter2" the
// tables put in node URLs, and prints nothing on stdout.
func wantUsageError(t *testing.T, want string, args ...string) {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, want)
	assert.NotContains(t, errOut, "hunter2", "no password in messages")
	assert.Empty(t, out)
}
