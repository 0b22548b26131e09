package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
)

// Exit statuses of `redlock exec` besides COMMAND's own (and exitUsage, 64).
// The values below 79 are from sysexits.h; 126 and 127 follow the shell and
// env(1).
const (
	exitUnavailable = 69  // EX_UNAVAILABLE: too few nodes answered to take the lock
	exitSoftware    = 70  // EX_SOFTWARE: an internal error
	exitBusy        = 75  // EX_TEMPFAIL: the lock is held by someone else (default of --busy-exit)
	exitLost        = 79  // the lock was lost while COMMAND ran
	exitCannotRun   = 126 // COMMAND could not be started
	exitNotFound    = 127 // COMMAND was not found
)

// signalLag bounds how long after ctx is canceled a signal that caused it
// may take to reach our own signal channel.
const signalLag = 100 * time.Millisecond

// nodesEnv names the environment variable read when --nodes is not given, so
// that passwords in node URLs need not appear on the command line (where ps
// shows them).
const nodesEnv = "REDLOCK_NODES"

const execHelp = `Usage: redlock exec [flags] [--] COMMAND [ARGS...]

Runs COMMAND only while holding the lock KEY on a majority of the Redis nodes:
a distributed flock(1), e.g. for a cron job installed on several hosts that
must run on one host at a time. While COMMAND runs the lock is extended in
the background (every --extend-every). If the lock is lost (an extension
fails, or its validity runs out first), COMMAND is sent SIGTERM, then SIGKILL
after --grace. The lock is released when COMMAND exits.

COMMAND runs in its own process group, so that SIGTERM and SIGKILL reach its
children too; SIGINT and SIGTERM received by redlock are forwarded to that
group. COMMAND should therefore not read from the terminal. Its stdin, stdout
and stderr are redlock's.

Nodes are redis:// or rediss:// URLs (redis://user:password@host:port/db), or
host:port, separated by commas, from --nodes or else $REDLOCK_NODES (keep
passwords there, not on the command line). Use an odd number of independent
masters, e.g. 3 or 5.

Exit status:
  COMMAND's status  COMMAND ran with the lock held throughout (128+N if a
                    signal N killed it)
  64                bad usage: flags, node URLs, missing COMMAND
  69                too few nodes answered to take the lock
  75                the lock is busy: another holder kept it for all of
                    --wait (change with --busy-exit, e.g. 0 for cron)
  79                the lock was lost while COMMAND ran; COMMAND was stopped
  126, 127          COMMAND could not be started, or was not found
  70                internal error
  130, 143          interrupted (SIGINT, SIGTERM) before COMMAND started

Example:
  export REDLOCK_NODES=redis://:secret@10.0.0.1:6379,redis://:secret@10.0.0.2:6379,redis://:secret@10.0.0.3:6379
  redlock exec --key nightly-report --ttl 30s --fence-env REPORT_FENCE -- /usr/local/bin/build-report --all

Flags:
`

// execFlags are the parsed flags of the exec subcommand.
type execFlags struct {
	nodes       []string
	key         string
	ttl         time.Duration
	wait        time.Duration
	extendEvery time.Duration
	grace       time.Duration
	nodeTimeout time.Duration
	quarantine  time.Duration
	fenceEnv    string
	busyExit    int
	verbose     bool
	command     []string
}

// parseExecFlags parses args. On --help it prints the help to stdout; on bad
// usage it prints the problem to stderr. ok is false in both cases, and code
// is the exit status to return.
func parseExecFlags(args []string, stdout, stderr io.Writer) (f execFlags, code int, ok bool) {
	fs := flag.NewFlagSet("redlock exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.String("nodes", "", "comma-separated node URLs (default $"+nodesEnv+")")
	fs.StringVar(&f.key, "key", "", "the lock's key on the nodes (required)")
	fs.DurationVar(&f.ttl, "ttl", 30*time.Second, "lock TTL: how long the lock outlives a crashed holder")
	fs.DurationVar(&f.wait, "wait", 0, "how long to wait for a busy lock (0: give up at once, like flock -n)")
	fs.DurationVar(&f.extendEvery, "extend-every", 0, "extension interval while COMMAND runs (default ttl/3)")
	fs.DurationVar(&f.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL when the lock is lost")
	fs.DurationVar(&f.nodeTimeout, "node-timeout", 0, "per-node timeout of each request (default 1% of ttl, 20ms..1s)")
	fs.DurationVar(&f.quarantine, "quarantine", 0, "turn on the amnesia guard with this quarantine, e.g. 1m, for nodes without persistence (0: off; see docs/fencing.md)")
	fs.StringVar(&f.fenceEnv, "fence-env", "", "put the lock's fencing token in COMMAND's environment under this name")
	fs.IntVar(&f.busyExit, "busy-exit", exitBusy, "exit status when the lock is busy")
	fs.BoolVar(&f.verbose, "v", false, "log every attempt, extension and release to stderr")
	// flag prints parse errors itself; the full help goes to stdout, and
	// only on --help.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, fs, execHelp)
			return f, 0, false
		}
		fmt.Fprintln(stderr, "Run 'redlock exec --help' for usage.")
		return f, exitUsage, false
	}
	bad := func(format string, a ...any) (execFlags, int, bool) {
		fmt.Fprintf(stderr, "redlock exec: "+format+"\nRun 'redlock exec --help' for usage.\n", a...)
		return f, exitUsage, false
	}
	f.command = fs.Args()
	if *nodes == "" {
		*nodes = os.Getenv(nodesEnv)
	}
	f.nodes = splitNodes(*nodes)
	switch {
	case len(f.nodes) == 0:
		return bad("no nodes: give --nodes or set $%s", nodesEnv)
	case f.key == "":
		return bad("--key is required")
	case len(f.command) == 0:
		return bad("no COMMAND given")
	case f.ttl <= 0 || f.ttl%time.Millisecond != 0:
		return bad("--ttl %v must be a positive whole number of milliseconds", f.ttl)
	case f.wait < 0 || f.grace < 0 || f.extendEvery < 0 || f.nodeTimeout < 0 || f.quarantine < 0:
		return bad("--wait, --grace, --extend-every, --node-timeout and --quarantine must not be negative")
	case f.busyExit < 0 || f.busyExit > 255:
		return bad("--busy-exit %d must be in 0..255", f.busyExit)
	case strings.ContainsAny(f.fenceEnv, "=\x00"):
		return bad("--fence-env %q is not a valid environment variable name", f.fenceEnv)
	}
	if v := f.ttl - redlock.Drift(f.ttl, redlock.DefaultDriftFactor); f.extendEvery >= v {
		return bad("--extend-every %v must be below the lock's validity %v (ttl − drift)", f.extendEvery, v)
	}
	return f, 0, true
}

// quietRedis silences go-redis's own log lines (such as every failed dial):
// exec and status report node failures themselves, once, with the node's
// outcome.
func quietRedis() { redis.SetLogger(nopLogger{}) }

type nopLogger struct{}

func (nopLogger) Printf(context.Context, string, ...any) {}

// printHelp prints a subcommand's help text and its flags to w.
func printHelp(w io.Writer, fs *flag.FlagSet, help string) {
	fmt.Fprint(w, help)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// splitNodes splits a comma-separated node list; "host:port" means
// "redis://host:port".
func splitNodes(s string) []string {
	var out []string
	for _, n := range strings.Split(s, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !strings.Contains(n, "://") {
			n = "redis://" + n
		}
		out = append(out, n)
	}
	return out
}

// runExec implements `redlock exec`: it returns the process exit status.
func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseExecFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	level := slog.LevelError // exec prints its own one-line notices
	if f.verbose {
		level = slog.LevelDebug
	}
	opts := []redlock.Option{redlock.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))}
	if f.nodeTimeout > 0 {
		opts = append(opts, redlock.WithNodeTimeout(f.nodeTimeout))
	}
	opts = append(opts, redlock.WithQuarantine(f.quarantine))
	quietRedis()
	client, err := redlock.Dial(f.nodes, opts...)
	if err != nil { // the error names the node, without its password
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return exitUsage
	}
	defer client.Close()

	// Our own subscription, next to main's signal.NotifyContext: it tells
	// which signal arrived, so that exactly that one is forwarded.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	lock, code := acquireForExec(ctx, client, f, sigs, stderr)
	if lock == nil {
		return code
	}
	// The Lease must outlive ctx: when main's context is canceled by a
	// signal, COMMAND is only asked to stop, and the lock must stay held
	// until it has.
	var holdOpts []redlock.Option
	if f.extendEvery > 0 {
		holdOpts = append(holdOpts, redlock.WithExtendInterval(f.extendEvery))
	}
	lease, err := lock.KeepAlive(context.WithoutCancel(ctx), holdOpts...)
	if err != nil {
		_ = lock.Release(context.WithoutCancel(ctx))
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return exitSoftware
	}
	code = runCommand(ctx, f, lease, sigs, stdout, stderr)
	if err := lease.Release(context.WithoutCancel(ctx)); err != nil && code != exitLost {
		// COMMAND's work is done; the keys that remain expire at the TTL.
		fmt.Fprintf(stderr, "redlock exec: warning: release: %v\n", err)
	}
	return code
}

// acquireForExec takes the lock, retrying while it is busy until --wait has
// passed. It returns the lock, or nil and the exit status.
func acquireForExec(ctx context.Context, client *redlock.Client, f execFlags, sigs <-chan os.Signal, stderr io.Writer) (*redlock.Lock, int) {
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	// A signal while we wait for the lock ends the wait.
	var got os.Signal // written by the watcher, read after it has ended
	stopWatch, watchDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watchDone)
		select {
		case got = <-sigs:
			cancel()
		case <-stopWatch:
		}
	}()
	interrupted := func() os.Signal {
		close(stopWatch)
		<-watchDone
		if got != nil {
			return got
		}
		select {
		case s := <-sigs:
			return s
		default:
			return nil
		}
	}

	deadline := time.Now().Add(f.wait)
	retry := redlock.DefaultRetry()
	var (
		lock *redlock.Lock
		err  error
	)
	for attempt := 1; ; attempt++ {
		lock, err = client.TryAcquire(actx, f.key, f.ttl)
		if err == nil || actx.Err() != nil || errors.Is(err, redlock.ErrInvalidArgument) {
			break
		}
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		delay, _ := retry.NextRetry(attempt)
		t := time.NewTimer(min(delay, left))
		select {
		case <-t.C:
		case <-actx.Done():
			t.Stop()
		}
		if actx.Err() != nil {
			break
		}
	}
	if sig := interrupted(); sig != nil {
		if lock != nil {
			_ = lock.Release(context.WithoutCancel(ctx))
		}
		fmt.Fprintf(stderr, "redlock exec: %v before the lock was taken\n", sig)
		return nil, 128 + signalNumber(sig)
	}
	if err == nil {
		return lock, 0
	}
	switch {
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return nil, exitUsage
	case busy(err), ctx.Err() != nil:
		fmt.Fprintf(stderr, "redlock exec: lock busy: %v\n", err)
		return nil, f.busyExit
	case errors.Is(err, redlock.ErrNotAcquired):
		fmt.Fprintf(stderr, "redlock exec: too few nodes answered to take the lock: %v\n", err)
		return nil, exitUnavailable
	}
	fmt.Fprintf(stderr, "redlock exec: %v\n", err)
	return nil, exitSoftware
}

// busy reports whether a failed acquisition met another holder: some node
// answered that the key is taken. Otherwise it failed because too few nodes
// answered.
func busy(err error) bool {
	var qe *redlock.QuorumError
	if !errors.As(err, &qe) {
		return false
	}
	for _, n := range qe.Nodes {
		if n.Outcome == redlock.OutcomeTaken {
			return true
		}
	}
	return false
}

// runCommand starts COMMAND, forwards signals to it, stops it if the lease
// ends (the lock is lost), and returns the exit status.
func runCommand(ctx context.Context, f execFlags, lease *redlock.Lease, sigs <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd := exec.Command(f.command[0], f.command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	cmd.Env = os.Environ()
	if f.fenceEnv != "" {
		cmd.Env = append(cmd.Env, f.fenceEnv+"="+strconv.FormatUint(lease.Lock().Token(), 10))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A background child still holding a pipe must not keep us waiting
	// (only when stdout/stderr are not files).
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotRun
	}

	var (
		mu     sync.Mutex
		exited bool
	)
	waited := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		mu.Lock()
		exited = true
		mu.Unlock()
		waited <- err
	}()
	// signalGroup signals COMMAND's process group, only while COMMAND has not
	// been reaped: its pid, which names the group, may be reused after.
	signalGroup := func(sig os.Signal) {
		mu.Lock()
		defer mu.Unlock()
		if !exited {
			_ = syscall.Kill(-cmd.Process.Pid, sig.(syscall.Signal))
		}
	}

	ctxDone, leaseDone := ctx.Done(), lease.Done()
	var grace <-chan time.Time
	forwarded := false // a signal has been forwarded to COMMAND
	for {
		select {
		case <-waited:
			status := exitStatus(cmd.ProcessState)
			switch err := lease.Err(); {
			case err == nil:
				return status
			case leaseDone != nil: // lost as COMMAND exited
				fmt.Fprintf(stderr, "redlock exec: %v; COMMAND exited with status %d, but did not hold the lock throughout\n", err, status)
			default:
				fmt.Fprintf(stderr, "redlock exec: COMMAND stopped with status %d after the lock was lost\n", status)
			}
			return exitLost
		case s := <-sigs:
			forwarded = true
			signalGroup(s)
		case <-ctxDone:
			// Canceled by main's signal handling, or by an embedding caller.
			// A signal reaches sigs at about the same time as it cancels ctx,
			// not necessarily before: give it a moment, and forward only it.
			ctxDone = nil
			if forwarded {
				break
			}
			t := time.NewTimer(signalLag)
			select {
			case s := <-sigs:
				signalGroup(s)
			case <-t.C:
				signalGroup(syscall.SIGTERM)
			}
			t.Stop()
			forwarded = true
		case <-leaseDone:
			leaseDone = nil
			fmt.Fprintf(stderr, "redlock exec: %v; sending SIGTERM to COMMAND (SIGKILL in %v)\n", lease.Err(), f.grace)
			signalGroup(syscall.SIGTERM)
			t := time.NewTimer(f.grace)
			defer t.Stop()
			grace = t.C
		case <-grace:
			grace = nil
			fmt.Fprintf(stderr, "redlock exec: COMMAND still running %v after SIGTERM; sending SIGKILL\n", f.grace)
			signalGroup(syscall.SIGKILL)
		}
	}
}

// exitStatus returns COMMAND's exit status the way a shell reports it:
// 128+N when signal N killed it.
func exitStatus(st *os.ProcessState) int {
	if st == nil {
		return exitSoftware
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

func signalNumber(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return int(n)
	}
	return int(syscall.SIGTERM)
}
