// Package execjob runs a job (a process group of its own) under a
// redlock.Lease and stops it when the lease ends: the part of `redlock exec`
// that keeps a job from running without its lock. cmd/redlock runs COMMAND
// under its guard process and the chaos harness runs short jobs directly;
// both supervise them with Supervise, so that the harness tests the very
// logic exec uses.
//
// The package is internal: its only callers are cmd/redlock and chaos.
package execjob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// ExitLost is the status Supervise returns when the lock was lost while the
// job ran (79, as `redlock exec` documents).
const ExitLost = 79

// SignalLag bounds how long after Supervise's ctx is canceled a signal that
// caused it may take to reach Config.Signals.
const SignalLag = 100 * time.Millisecond

// Status is what became of a job.
type Status struct {
	// Code is the exit status as a shell reports it: 128+N if signal N
	// killed the job.
	Code int
	// Err is set when the job could not be started; Code is then 126 or
	// 127.
	Err error
}

// Process is a job running in a process group of its own.
type Process interface {
	// Signal sends sig to the job's whole process group, as long as the
	// group can be reached (once the job has been reaped, never).
	Signal(sig syscall.Signal)
	// Done delivers the job's Status once, when the job has exited.
	Done() <-chan Status
}

// Config is what Supervise needs besides the job.
type Config struct {
	// Lease keeps the lock while the job runs; when its context ends (the
	// lock is lost), the job is stopped.
	Lease *redlock.Lease
	// Grace is the time between SIGTERM (a forwarded signal, or the lock
	// lost) and SIGKILL. Once the lock is lost, SIGKILL comes at the latest
	// when the lock's validity runs out, whatever Grace.
	Grace time.Duration
	// Signals are the signals to forward to the job's group (nil: none).
	Signals <-chan os.Signal
	// Stderr receives Supervise's one-line notices.
	Stderr io.Writer
	// Verbose also reports the job's exit status.
	Verbose bool
	// DescribeNodes, if not nil, writes what each node answered to the last
	// extension when the lock was lost for want of a quorum.
	DescribeNodes func(w io.Writer, nodes []redlock.NodeResult)
	// Mutant, nil outside the chaos harness, can make Supervise a
	// deliberately broken supervisor (mutation.Knobs.ExecIgnoresLoss).
	Mutant *mutation.Knobs
}

// Supervise waits for the job p, forwards the signals from c.Signals to its
// group, stops it if c.Lease ends (the lock is lost: SIGTERM, then SIGKILL
// after c.Grace or when the lock's validity runs out, whichever comes first)
// or c.Grace after the first forwarded signal, and returns the exit status:
// the job's own, ExitLost if the lock was lost while the job ran, or 128+N
// if the job was killed c.Grace after signal N was forwarded. A cancellation
// of ctx counts as the signal that caused it (read from c.Signals within
// SignalLag), else as SIGTERM. held reports whether the job exited on its
// own with the lock held throughout.
func Supervise(ctx context.Context, p Process, c Config) (code int, held bool) {
	lease, stderr := c.Lease, c.Stderr
	ctxDone, leaseDone := ctx.Done(), lease.Done()
	var (
		killTimer *time.Timer
		kill      <-chan time.Time // fires when the job is to get SIGKILL
		killAt    time.Time
		killed    os.Signal // the forwarded signal after which the job was killed
		got       os.Signal // the first signal forwarded to the job
	)
	// killWithin makes the job get SIGKILL at most d from now. A deadline
	// already set stands if it is sooner: neither a second signal nor the
	// loss of the lock postpones the SIGKILL.
	killWithin := func(d time.Duration) {
		at := time.Now().Add(d)
		if killTimer != nil {
			if !at.Before(killAt) {
				return
			}
			killTimer.Stop()
		}
		killAt, killTimer = at, time.NewTimer(d)
		kill = killTimer.C
	}
	defer func() {
		if killTimer != nil {
			killTimer.Stop()
		}
	}()
	forward := func(s os.Signal) {
		p.Signal(s.(syscall.Signal))
		if got == nil {
			got = s
			killWithin(c.Grace)
		}
	}
	for {
		select {
		case st := <-p.Done():
			if st.Err != nil {
				fmt.Fprintf(stderr, "redlock exec: %v\n", st.Err)
				return st.Code, false
			}
			if c.Verbose {
				fmt.Fprintf(stderr, "redlock exec: COMMAND exited with status %d\n", st.Code)
			}
			switch err := lease.Err(); {
			case err == nil && killed != nil:
				fmt.Fprintf(stderr, "redlock exec: COMMAND killed %v after %v\n", c.Grace, killed)
				return 128 + SignalNumber(killed), false
			case err == nil:
				return st.Code, got == nil
			case leaseDone != nil: // lost as the job exited
				fmt.Fprintf(stderr, "redlock exec: %v; COMMAND exited with status %d, but did not hold the lock throughout\n", err, st.Code)
			default:
				fmt.Fprintf(stderr, "redlock exec: COMMAND stopped with status %d after the lock was lost\n", st.Code)
			}
			return ExitLost, false
		case s := <-c.Signals:
			forward(s)
		case <-ctxDone:
			// Canceled by a signal handler, or by an embedding caller. A
			// signal reaches c.Signals at about the same time as it cancels
			// ctx, not necessarily before: give it a moment, and forward
			// only it.
			ctxDone = nil
			if got != nil {
				break
			}
			s := CancelSignal(c.Signals)
			if s == nil {
				s = syscall.SIGTERM
			}
			forward(s)
		case <-leaseDone:
			leaseDone = nil
			if c.Mutant.ExecKeepsJob() { // chaos mutant hook
				break
			}
			// Once the lock's validity has run out, another holder may take
			// it: the job gets SIGKILL then at the latest, whatever Grace.
			left := max(min(c.Grace, time.Until(lease.Lock().ValidUntil())), 0)
			when := ""
			if left < c.Grace {
				when = ", when the lock's validity runs out"
			}
			fmt.Fprintf(stderr, "redlock exec: %v; sending SIGTERM to COMMAND (SIGKILL in %v%s)\n", lease.Err(), left.Round(time.Millisecond), when)
			if qe := (*redlock.QuorumError)(nil); c.DescribeNodes != nil && errors.As(lease.Err(), &qe) {
				fmt.Fprintln(stderr, "redlock exec: what each node answered to the last extension:")
				c.DescribeNodes(stderr, qe.Nodes)
			}
			p.Signal(syscall.SIGTERM)
			killWithin(left)
		case <-kill:
			kill = nil
			if lease.Err() == nil {
				killed = got
				fmt.Fprintf(stderr, "redlock exec: COMMAND still running %v after %v; sending SIGKILL\n", c.Grace, got)
			} else {
				fmt.Fprintf(stderr, "redlock exec: COMMAND still running after SIGTERM, the lock lost; sending SIGKILL\n")
			}
			p.Signal(syscall.SIGKILL)
		}
	}
}

// CancelSignal returns the signal that canceled a context, for a caller
// that has just seen it canceled: a signal handler (signal.NotifyContext)
// cancels it at about the same time as the signal reaches sigs, not
// necessarily after. It waits up to SignalLag for a signal on sigs, and
// returns nil if none came (the context was canceled by its caller). Reading
// the signal here, and nowhere else once the context has ended, makes sigs
// the one source of "which signal came".
func CancelSignal(sigs <-chan os.Signal) os.Signal {
	t := time.NewTimer(SignalLag)
	defer t.Stop()
	select {
	case s := <-sigs:
		return s
	case <-t.C:
		return nil
	}
}

// SignalNumber returns s's number; SIGTERM's for a signal that is not a
// syscall.Signal.
func SignalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}
