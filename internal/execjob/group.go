package execjob

import (
	"errors"
	"io"
	"os/exec"
	"sync"
	"syscall"
)

// Group is a job started by Start: a process that leads a process group of
// its own. It has none of `redlock exec`'s watchdog (which needs the redlock
// binary): if the caller dies, the job runs on. The chaos harness uses it
// for its short jobs.
type Group struct {
	cmd  *exec.Cmd
	done chan Status

	mu   sync.Mutex
	over bool // the leader has been reaped: its group id may be reused
}

// Start starts args[0] with arguments args[1:] as the leader of a new
// process group, with the given environment (nil: the caller's) and output
// (nil: the null device). It returns an error wrapping exec.ErrNotFound or
// fs.ErrNotExist when the program does not exist.
func Start(args, env []string, stdout, stderr io.Writer) (*Group, error) {
	if len(args) == 0 {
		return nil, errors.New("execjob: no command")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	g := &Group{cmd: cmd, done: make(chan Status, 1)}
	go func() {
		_ = cmd.Wait() // an exit status, or an error copying output
		g.mu.Lock()
		g.over = true
		g.mu.Unlock()
		st := Status{Code: cmd.ProcessState.ExitCode()}
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.Code = 128 + int(ws.Signal())
		}
		g.done <- st
	}()
	return g, nil
}

// Signal sends sig to the job's process group until the leader has been
// reaped. What else is left in the group then is not signaled.
func (g *Group) Signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.over {
		_ = syscall.Kill(-g.cmd.Process.Pid, sig)
	}
}

// Done delivers the job's Status once, when the leader has exited and been
// reaped.
func (g *Group) Done() <-chan Status { return g.done }

// Pid returns the group leader's process id (also the group's id).
func (g *Group) Pid() int { return g.cmd.Process.Pid }
