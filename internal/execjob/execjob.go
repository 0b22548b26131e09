// Package execjob runs a job (a process group of its own) under a
// redlock.Lease and stops it when the lease ends: the part of `redlock exec`
// that keeps a job from running without its lock. cmd/redlock runs COMMAND
// under its watchdog process and the chaos harness runs short jobs directly;
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

// minKillGuard is KillGuard's floor.
const minKillGuard = 100 * time.Millisecond

// KillGuard returns the kill guard of a lock of the given TTL: how long
// before the lock's validity ends (Lock.ValidUntil) Supervise sends the job
// SIGKILL at the latest once no extension has kept the lock: the larger of
// 100 ms and 2% of the TTL. It covers the supervisor's timer firing late on
// a loaded machine and the kill's delivery, so that the job is gone before
// the nodes can free the key (the validity already ends the drift allowance,
// 1% of the TTL + 2 ms, before they do). docs/cli.md has the margins
// measured.
func KillGuard(ttl time.Duration) time.Duration { return max(minKillGuard, ttl/50) }

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
	// KillGuard before the lock's validity runs out, whatever Grace.
	Grace time.Duration
	// KillGuard is how long before the lock's validity ends the job gets
	// SIGKILL at the latest when no extension has kept the lock, lost or
	// not yet (an extension still in flight); 0: KillGuard of the lock's
	// TTL.
	KillGuard time.Duration
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
// after c.Grace or the kill guard before the lock's validity runs out,
// whichever comes first), kills it the kill guard before the validity runs
// out if no extension has succeeded by then, or c.Grace after the first
// forwarded signal, and returns the exit status: the job's own, ExitLost if
// the lock was lost (or about to be) while the job ran, or 128+N if the job
// was killed c.Grace after signal N was forwarded. A cancellation of ctx
// counts as the signal that caused it (read from c.Signals within
// SignalLag), else as SIGTERM. held reports whether the job exited on its
// own with the lock held throughout.
func Supervise(ctx context.Context, p Process, c Config) (code int, held bool) {
	if c.KillGuard <= 0 {
		c.KillGuard = KillGuard(c.Lease.Lock().TTL())
	}
	s := &supervisor{p: p, c: c}
	defer s.stopKillTimer()
	guardAt := c.Lease.ValidUntil()
	guard := time.NewTimer(time.Until(guardAt.Add(-c.KillGuard)))
	defer guard.Stop()
	ctxDone, leaseDone, guardDone := ctx.Done(), c.Lease.Done(), guard.C
	for {
		select {
		case st := <-p.Done():
			return s.exited(st, leaseDone != nil)
		case <-guardDone:
			if v := c.Lease.ValidUntil(); v.After(guardAt) { // extended
				guardAt = v
				guard.Reset(time.Until(v.Add(-c.KillGuard)))
				break
			}
			guardDone = nil
			s.expiring()
		case sig := <-c.Signals:
			s.forward(sig)
		case <-ctxDone:
			// Canceled by a signal handler, or by an embedding caller:
			// forward only the signal that caused it.
			ctxDone = nil
			if s.got != nil {
				break
			}
			sig := CancelSignal(c.Signals)
			if sig == nil {
				sig = syscall.SIGTERM
			}
			s.forward(sig)
		case <-leaseDone:
			leaseDone = nil
			s.lost()
		case <-s.kill:
			s.kill = nil
			s.killNow()
		}
	}
}

// supervisor is Supervise's state between the events of its loop.
type supervisor struct {
	p Process
	c Config

	killTimer *time.Timer
	kill      <-chan time.Time // fires when the job is to get SIGKILL
	killAt    time.Time
	killed    os.Signal // the forwarded signal after which the job was killed
	got       os.Signal // the first signal forwarded to the job
	expired   bool      // killed by the kill guard while the lease was live
}

// killWithin makes the job get SIGKILL at most d from now. A deadline
// already set stands if it is sooner: neither a second signal nor the loss
// of the lock postpones the SIGKILL.
func (s *supervisor) killWithin(d time.Duration) {
	at := time.Now().Add(d)
	if s.killTimer != nil {
		if !at.Before(s.killAt) {
			return
		}
		s.killTimer.Stop()
	}
	s.killAt, s.killTimer = at, time.NewTimer(d)
	s.kill = s.killTimer.C
}

func (s *supervisor) stopKillTimer() {
	if s.killTimer != nil {
		s.killTimer.Stop()
	}
}

// forward passes sig on to the job's group; the first one forwarded starts
// the grace period.
func (s *supervisor) forward(sig os.Signal) {
	s.p.Signal(sig.(syscall.Signal))
	if s.got == nil {
		s.got = sig
		s.killWithin(s.c.Grace)
	}
}

// exited returns the exit status of a job that ended with st. lossUnseen
// says the loop had not seen the lease end: if it has ended, it ended as
// the job exited.
func (s *supervisor) exited(st Status, lossUnseen bool) (code int, held bool) {
	stderr := s.c.Stderr
	if st.Err != nil {
		fmt.Fprintf(stderr, "redlock exec: %v\n", st.Err)
		return st.Code, false
	}
	if s.c.Verbose {
		fmt.Fprintf(stderr, "redlock exec: COMMAND exited with status %d\n", st.Code)
	}
	switch err := s.c.Lease.Err(); {
	case s.expired && (err == nil || lossUnseen):
		fmt.Fprintf(stderr, "redlock exec: COMMAND killed with status %d: the lock's validity was running out and no extension had succeeded\n", st.Code)
		return ExitLost, false
	case err == nil && s.killed != nil:
		fmt.Fprintf(stderr, "redlock exec: COMMAND killed %v after %v\n", s.c.Grace, s.killed)
		return 128 + SignalNumber(s.killed), false
	case err == nil:
		return st.Code, s.got == nil
	case lossUnseen: // lost as the job exited
		fmt.Fprintf(stderr, "redlock exec: %v; COMMAND exited with status %d, but did not hold the lock throughout\n", err, st.Code)
	default:
		fmt.Fprintf(stderr, "redlock exec: COMMAND stopped with status %d after the lock was lost\n", st.Code)
	}
	return ExitLost, false
}

// lost stops the job once the lease has ended: SIGTERM now, SIGKILL after
// Grace or the kill guard before the lock's validity runs out, whichever
// comes first (at the validity's end another holder may take the lock).
func (s *supervisor) lost() {
	if s.c.Mutant.ExecKeepsJob() { // chaos mutant hook
		return
	}
	lease, stderr := s.c.Lease, s.c.Stderr
	left := max(min(s.c.Grace, time.Until(lease.Lock().ValidUntil())-s.c.KillGuard), 0)
	when := ""
	if left < s.c.Grace {
		when = fmt.Sprintf(", %v before the lock's validity runs out", s.c.KillGuard)
	}
	fmt.Fprintf(stderr, "redlock exec: %v; sending SIGTERM to COMMAND (SIGKILL in %v%s)\n", lease.Err(), left.Round(time.Millisecond), when)
	if qe := (*redlock.QuorumError)(nil); s.c.DescribeNodes != nil && errors.As(lease.Err(), &qe) {
		fmt.Fprintln(stderr, "redlock exec: what each node answered to the last extension:")
		s.c.DescribeNodes(stderr, qe.Nodes)
	}
	s.p.Signal(syscall.SIGTERM)
	s.killWithin(left)
}

// expiring kills the job the kill guard before the lock's validity runs
// out when no extension has succeeded (one may still be in flight): the
// lease would end only at the validity's end, too late for the kill.
func (s *supervisor) expiring() {
	if s.c.Mutant.ExecKeepsJob() || s.c.Lease.Err() != nil { // chaos mutant hook; or lost(), which has set the kill
		return
	}
	s.expired = true
	fmt.Fprintf(s.c.Stderr, "redlock exec: no extension has succeeded and the lock's validity runs out in %v; sending SIGKILL to COMMAND\n",
		time.Until(s.c.Lease.ValidUntil()).Round(time.Millisecond))
	s.p.Signal(syscall.SIGKILL)
}

// killNow sends SIGKILL when the grace period, or the lock's validity, is
// over.
func (s *supervisor) killNow() {
	if s.c.Lease.Err() == nil {
		s.killed = s.got
		fmt.Fprintf(s.c.Stderr, "redlock exec: COMMAND still running %v after %v; sending SIGKILL\n", s.c.Grace, s.got)
	} else {
		fmt.Fprintf(s.c.Stderr, "redlock exec: COMMAND still running after SIGTERM, the lock lost; sending SIGKILL\n")
	}
	s.p.Signal(syscall.SIGKILL)
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
