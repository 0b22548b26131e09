package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/d3b93e30/redlock/internal/execjob"
)

// COMMAND never outlives redlock exec. It runs under a watchdog: redlock
// itself, re-executed with the hidden first argument watchdogArg, as the
// leader of a new process group. The watchdog starts COMMAND in that group and
//
//   - kills the whole group with SIGKILL as soon as redlock exec is gone,
//     however it died (SIGKILL included): it holds the read end of a pipe
//     whose only write end is redlock's, and reads end of file then;
//   - kills what COMMAND left behind in the group once COMMAND has exited:
//     nothing left in the group runs on without the lock (a process that
//     left the group, by setsid, is out of reach);
//   - reports COMMAND's status to redlock exec on a second pipe.
//
// COMMAND also gets the parent-death signal SIGKILL (Linux), in case the
// watchdog itself is killed. redlock exec signals the whole group; the
// watchdog catches and drops those signals, so that COMMAND alone decides.

// watchdogArg is the hidden first argument that runs redlock as a job
// watchdog.
const watchdogArg = "__job-watchdog"

// The watchdog's files after stdin, stdout and stderr (exec.Cmd.ExtraFiles).
const (
	watchdogLifeFD   = 3 // read end: end of file means redlock exec is gone
	watchdogStatusFD = 4 // write end: one status line for redlock exec
)

// jobStatus is what became of COMMAND.
type jobStatus = execjob.Status

// job is COMMAND running under its watchdog, as seen from redlock exec: an
// execjob.Process.
type job struct {
	watchdog *exec.Cmd
	life     *os.File // the write end of the watchdog's life pipe
	done     chan jobStatus

	mu   sync.Mutex
	over bool // the watchdog is about to be reaped: its group id may be reused
}

// startJob starts COMMAND (args) under a watchdog with the given environment and
// output. It returns an error only if the watchdog itself could not start.
func startJob(args, env []string, stdout, stderr io.Writer) (*job, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	statR, statW, err := os.Pipe()
	if err != nil {
		lifeR.Close()
		lifeW.Close()
		return nil, err
	}
	cmd := exec.Command(self, append([]string{watchdogArg, "--"}, args...)...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.ExtraFiles = []*os.File{lifeR, statW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A background child still holding a pipe must not keep us waiting
	// (only when stdout/stderr are not files).
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	lifeR.Close()
	statW.Close()
	if err != nil {
		lifeW.Close()
		statR.Close()
		return nil, err
	}
	j := &job{watchdog: cmd, life: lifeW, done: make(chan jobStatus, 1)}
	go func() {
		report, _ := io.ReadAll(statR)
		statR.Close()
		st, ok := parseJobStatus(report)
		if !ok {
			// The watchdog died without a report (killed by someone else): its
			// group may still hold COMMAND's children.
			j.Signal(syscall.SIGKILL)
		}
		j.mu.Lock()
		j.over = true
		j.mu.Unlock()
		_ = cmd.Wait()
		lifeW.Close()
		if !ok {
			st = jobStatus{Code: exitStatus(cmd.ProcessState)}
		}
		j.done <- st
	}()
	return j, nil
}

// Done delivers COMMAND's status once, when the watchdog has reported it (or
// died) and has been reaped.
func (j *job) Done() <-chan jobStatus { return j.done }

// Signal sends sig to COMMAND's process group while its watchdog has not been
// reaped (the group's id, the watchdog's pid, could be reused after that).
func (j *job) Signal(sig syscall.Signal) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.over {
		_ = syscall.Kill(-j.watchdog.Process.Pid, sig)
	}
}

// parseJobStatus reads the watchdog's report: "exit N", "signal N",
// "notfound MESSAGE" or "cannotrun MESSAGE".
func parseJobStatus(b []byte) (jobStatus, bool) {
	word, rest, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	n, nerr := strconv.Atoi(rest)
	switch {
	case word == "exit" && nerr == nil:
		return jobStatus{Code: n}, true
	case word == "signal" && nerr == nil:
		return jobStatus{Code: 128 + n}, true
	case word == "notfound":
		return jobStatus{Code: exitNotFound, Err: errors.New(rest)}, true
	case word == "cannotrun":
		return jobStatus{Code: exitCannotRun, Err: errors.New(rest)}, true
	}
	return jobStatus{}, false
}

// runWatchdog is the watchdog process: it runs COMMAND (args, after "--"); its
// last act kills its own process group, itself included.
func runWatchdog(args []string) int {
	life, status := os.NewFile(watchdogLifeFD, "life"), os.NewFile(watchdogStatusFD, "status")
	if len(args) < 2 || args[0] != "--" || life == nil || status == nil {
		fmt.Fprintln(os.Stderr, "redlock: "+watchdogArg+" is internal to redlock exec")
		return exitUsage
	}
	// COMMAND must inherit neither pipe.
	syscall.CloseOnExec(watchdogLifeFD)
	syscall.CloseOnExec(watchdogStatusFD)
	pgid := syscall.Getpgrp()
	// Caught (not ignored, which COMMAND would inherit) and dropped: as a
	// member of the group COMMAND gets them too, and decides alone.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM)
	go func() {
		_, _ = io.Copy(io.Discard, life) // returns when redlock exec is gone
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}()

	report := make(chan string, 1)
	go func() {
		// The parent-death signal fires when the thread that started the
		// child exits, not the process: keep this goroutine, and so its
		// thread, alive until COMMAND has been reaped. It is never unlocked,
		// so the thread ends with the goroutine.
		runtime.LockOSThread()
		cmd := exec.Command(args[1], args[2:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		cmd.SysProcAttr = jobProcAttr()
		if err := cmd.Start(); err != nil {
			msg := strings.ReplaceAll(err.Error(), "\n", " ")
			if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
				report <- "notfound " + msg
			} else {
				report <- "cannotrun " + msg
			}
			return
		}
		_ = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			report <- "signal " + strconv.Itoa(int(ws.Signal()))
		} else {
			report <- "exit " + strconv.Itoa(cmd.ProcessState.ExitCode())
		}
	}()
	_, _ = fmt.Fprintln(status, <-report)
	_ = status.Close()
	// Whatever COMMAND left running in the group must not run on without
	// the lock.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	time.Sleep(time.Second) // not reached: SIGKILL to oneself lands at once
	return exitSoftware
}
