package chaos

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"syscall"
	"time"

	"github.com/d3b93e30/redlock/internal/execjob"
)

// ModeExec: what `redlock exec` does. Acquire, then Lock.KeepAlive, then a
// real job process (sh -c 'sleep …', for the client's hold time) in a
// process group of its own, supervised by the same code as `redlock exec`
// (internal/execjob): when the lease ends, the job gets SIGTERM, then
// SIGKILL at the latest a kill guard (the larger of 100 ms and 2 % of the
// TTL) before the lock's validity runs out. The holder
// writes to the resources on the job's behalf for as long as the job
// process runs, whatever the lock's state: the job does not know about the
// lock. The hold ends when the job has exited (as its reaping tells), not
// when the lease ended, so a job that outlives its lock overlaps the next
// holder.
const ModeExec Mode = "exec"

// watchedJob is a job whose exit the holder sees as well as the supervisor:
// Supervise reads its Done, the holder waits on exited.
type watchedJob struct {
	*execjob.Group
	done     chan execjob.Status
	exited   chan struct{} // closed when the job has exited, after exitedAt is set
	exitedAt time.Time
	note     func(at time.Time, text string)
}

func watchJob(g *execjob.Group, note func(at time.Time, text string)) *watchedJob {
	j := &watchedJob{Group: g, done: make(chan execjob.Status, 1), exited: make(chan struct{}), note: note}
	go func() {
		st := <-g.Done()
		j.exitedAt = time.Now()
		close(j.exited)
		j.done <- st
	}()
	return j
}

func (j *watchedJob) Done() <-chan execjob.Status { return j.done }

// Signal sends sig to the job's group, as Supervise asks, and notes when
// SIGTERM and SIGKILL were sent while the job's exit was not yet seen. The
// hold ends when the exit is seen, a little after the job died; no process
// of the group runs after SIGKILL, so a trial whose job outlived its lock
// then shows which came late: the supervisor's SIGKILL, or only the
// sighting of the exit.
func (j *watchedJob) Signal(sig syscall.Signal) {
	j.Group.Signal(sig)
	name := map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGKILL: "SIGKILL"}[sig]
	select {
	case <-j.exited:
	default:
		if name != "" {
			j.note(time.Now(), "the job's group was sent "+name)
		}
	}
}

// holdExec is one hold in ModeExec. It reports whether the lock was
// acquired.
func (h *holder) holdExec(ctx context.Context, n int) bool {
	w := h.w
	lock, hold, ok := h.acquire(ctx, n)
	if !ok {
		return false
	}
	bg := context.WithoutCancel(ctx)

	// As in redlock exec, the lease outlives the trial's context: when that
	// ends, the job is only asked to stop, and the lock stays held until it
	// has.
	lease, err := lock.KeepAlive(bg)
	if err != nil {
		h.o.Note(time.Now(), fmt.Sprintf("client %d: keepalive: %v", h.i, err))
		h.o.Released(hold, time.Now())
		_ = lock.Release(bg)
		return true
	}
	secs := strconv.FormatFloat(w.holdFor(h.i).Seconds(), 'f', 3, 64)
	g, err := execjob.Start([]string{"sh", "-c", "sleep " + secs}, nil, nil, nil)
	if err != nil {
		h.o.Note(time.Now(), fmt.Sprintf("client %d: cannot start the job: %v", h.i, err))
		h.o.Released(hold, time.Now())
		_ = lease.Release(bg)
		return true
	}
	job := watchJob(g, func(at time.Time, text string) { h.o.Note(at, fmt.Sprintf("client %d: %s", h.i, text)) })
	supervised := make(chan int, 1)
	go func() {
		// The trial's end cancels ctx: the job gets SIGTERM, as a signal
		// to redlock exec would give it.
		code, _ := execjob.Supervise(ctx, job, execjob.Config{Lease: lease, Grace: w.TTL, Stderr: io.Discard, Mutant: h.mutant})
		supervised <- code
	}()

	l := lease.Lock()
	for running := true; running; {
		if nl := lease.Lock(); nl != l {
			l = nl
			h.o.Extended(hold, l.ValidUntil())
		}
		h.write(hold, l.Token())
		t := time.NewTimer(w.writeEvery())
		select {
		case <-job.exited:
			running = false
		case <-t.C:
		}
		t.Stop()
	}
	h.o.Released(hold, job.exitedAt)
	if code := <-supervised; code == execjob.ExitLost {
		h.o.Note(job.exitedAt, fmt.Sprintf("client %d: job stopped, the lock lost: %v", h.i, lease.Err()))
	}
	if lease.Release(bg) == nil {
		h.stats.release(lock.Owner())
	}
	return true
}
