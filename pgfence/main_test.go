package pgfence

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain stops the shared PostgreSQL server after the tests and fails the
// run if its postmaster or data directory is left, or a goroutine leaked.
func TestMain(m *testing.M) {
	code := m.Run()
	if srv := shared.srv; srv != nil {
		if err := srv.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "pgfence: stopping the server:", err)
			code = 1
		}
		if srv.Running() || syscall.Kill(srv.Pid(), 0) != syscall.ESRCH {
			fmt.Fprintf(os.Stderr, "pgfence: postmaster pid %d still exists after Close\n", srv.Pid())
			code = 1
		}
		if _, err := os.Stat(srv.dir); !os.IsNotExist(err) {
			fmt.Fprintf(os.Stderr, "pgfence: data directory %s left after Close (%v)\n", srv.dir, err)
			code = 1
		}
	}
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintln(os.Stderr, "pgfence: goroutines left behind after the tests:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// findLeaks returns goleak's report once no goroutine is left, or the last
// report after 5 s: go-redis's dial probes may outlive a closed client by
// a second, pgx's pool by its health-check tick.
func findLeaks() error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}
