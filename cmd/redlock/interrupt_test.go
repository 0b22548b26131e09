package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A signal reaches redlock exec twice: it cancels main's context
// (signal.NotifyContext) and arrives on exec's own channel, in either order
// and not at the same instant. Whichever exec sees first, it must report
// the signal and act on it.

// openLease is a Lease that never ends.
type openLease struct{}

func (openLease) Done() <-chan struct{} { return nil }
func (openLease) Err() error            { return nil }

// sendAfter sends sig on sigs d from now (fake time in a bubble); the
// channel it returns is closed once it has.
func sendAfter(sigs chan<- os.Signal, sig os.Signal, d time.Duration) <-chan struct{} {
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		time.Sleep(d)
		sigs <- sig
	}()
	return sent
}

func TestHoldFor_SignalSeenThroughEitherPath(t *testing.T) {
	f := execFlags{minHold: time.Minute}
	for _, tc := range []struct {
		name     string
		cancel   bool          // main's context is canceled when the hold begins
		sigAfter time.Duration // the signal reaches sigs this long after; <0: never
		want     string
	}{
		{"the signal only", false, 0, "terminated during --min-hold: leaving the lock to expire"},
		{"both at once", true, 0, "terminated during --min-hold: leaving the lock to expire"},
		{"the context first, the signal 10ms later", true, 10 * time.Millisecond, "terminated during --min-hold: leaving the lock to expire"},
		{"a caller's cancellation, no signal", true, -1, "context canceled during --min-hold: leaving the lock to expire"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.cancel {
					cancel()
				}
				sigs := make(chan os.Signal, 1)
				if tc.sigAfter >= 0 {
					sent := sendAfter(sigs, syscall.SIGTERM, tc.sigAfter)
					defer func() { <-sent }()
				}
				var stderr bytes.Buffer
				held := holdFor(ctx, f, time.Now(), 0, openLease{}, sigs, &stderr)
				assert.False(t, held, "the wait ended without a release")
				assert.Contains(t, stderr.String(), tc.want)
			})
		})
	}
}

func TestWatchSignals_SignalSeenThroughEitherPath(t *testing.T) {
	t.Run("a signal cancels the wait", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			sigs := make(chan os.Signal, 1)
			wctx, stop := watchSignals(context.Background(), sigs)
			sigs <- syscall.SIGINT
			<-wctx.Done()
			assert.Equal(t, syscall.SIGINT, stop())
		})
	})
	t.Run("main's context first, the signal 10ms later", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			sigs := make(chan os.Signal, 1)
			wctx, stop := watchSignals(ctx, sigs)
			cancel()
			<-wctx.Done() // Acquire returns
			sent := sendAfter(sigs, syscall.SIGTERM, 10*time.Millisecond)
			defer func() { <-sent }()
			assert.Equal(t, syscall.SIGTERM, stop())
		})
	})
	t.Run("a caller's cancellation, no signal", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			wctx, stop := watchSignals(ctx, make(chan os.Signal, 1))
			cancel()
			<-wctx.Done()
			assert.Nil(t, stop())
		})
	})
	t.Run("no signal, the acquisition ended", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			wctx, stop := watchSignals(context.Background(), make(chan os.Signal, 1))
			assert.Nil(t, stop())
			assert.Error(t, wctx.Err(), "the watcher's context ends with it")
		})
	})
}

// A signal while exec waits for a busy lock (--wait) ends the wait with
// 128+N, and COMMAND never runs; the wait running out exits busy.
func TestExec_SignalDuringTheWait(t *testing.T) {
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	started, stop, ran := filepath.Join(dir, "started"), filepath.Join(dir, "stop"), filepath.Join(dir, "ran")
	holder := startRedlock(t, bin, nodes, "exec", "--key", "wait", "--",
		"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done`, started, stop)
	holder.waitFile(t, started)

	for i := range 5 {
		w := startRedlock(t, bin, nodes, "exec", "--key", "wait", "--wait", "60s", "-v", "--", "touch", ran)
		// -v logs every attempt: the second one means it is waiting.
		for strings.Count(w.stderr.String(), "acquire attempt failed") < 2 {
			require.True(t, w.running(), w.stderr.String())
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
		assert.Equal(t, 128+int(syscall.SIGTERM), w.wait(t), "run %d: %s", i, w.stderr.String())
		assert.Contains(t, w.stderr.String(), "terminated before the lock was taken", "run %d", i)
	}

	busy := startRedlock(t, bin, nodes, "exec", "--key", "wait", "--wait", "300ms", "-v", "--", "touch", ran)
	assert.Equal(t, exitBusy, busy.wait(t), busy.stderr.String())
	assert.Contains(t, busy.stderr.String(), "lock busy")
	assert.NoFileExists(t, ran, "COMMAND never ran without the lock")

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	assert.Equal(t, 0, holder.wait(t), holder.stderr.String())
}
