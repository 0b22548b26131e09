package etcdcompare

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// drainTime is how long etcd's servers and gRPC clients may take to stop
// their goroutines after Close (measured: about 3 s on 2 cores); goleak's own
// retries give up after about 2 s.
const drainTime = 15 * time.Second

// findLeaks returns goleak's report once no goroutine is left beyond those
// ignored, or the last report after drainTime.
func findLeaks(opts ...goleak.Option) error {
	deadline := time.Now().Add(drainTime)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// checkLeaks fails t if goroutines started during the test outlive it
// (after allowing etcd and gRPC to drain).
func checkLeaks(t *testing.T) {
	t.Helper()
	opts := []goleak.Option{goleak.IgnoreCurrent()}
	t.Cleanup(func() {
		if err := findLeaks(opts...); err != nil {
			t.Errorf("goroutines left behind: %v", err)
		}
	})
}

// TestMain checks that the whole run leaves no goroutine behind.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left behind after the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
