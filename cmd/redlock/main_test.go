package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// The end-to-end tests run the real redlock binary, built once (the first
// time a test asks for it) into a directory that TestMain removes.

func init() {
	// In-process runExec starts its job guard by re-executing this test
	// binary (os.Executable): run the guard then, not the tests.
	if len(os.Args) > 1 && os.Args[1] == guardArg {
		os.Exit(runGuard(os.Args[2:]))
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
