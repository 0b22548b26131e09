package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/execjob"
)

// Exit statuses of `redlock exec` besides COMMAND's own (and exitUsage, 64).
// The values below 79 are from sysexits.h; 126 and 127 follow the shell and
// env(1).
const (
	exitUnavailable = 69               // EX_UNAVAILABLE: too few nodes answered to take the lock
	exitSoftware    = 70               // EX_SOFTWARE: an internal error
	exitBusy        = 75               // EX_TEMPFAIL: the lock is held by someone else (default of --busy-exit)
	exitLost        = execjob.ExitLost // 79: the lock was lost while COMMAND ran
	exitCannotRun   = 126              // COMMAND could not be started
	exitNotFound    = 127              // COMMAND was not found
)

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
after --grace or the kill guard before the lock's validity runs out,
whichever comes first: another host may take the lock then. The kill guard
is the larger of 100ms and 2% of --ttl; COMMAND also gets SIGKILL that long
before the validity ends while an extension has not succeeded yet, and a
--ttl too short for it is refused. The lock is released when COMMAND
exits, or with --min-hold once that time has passed since it was taken.
While it holds the lock, redlock keeps a record of the holder (host name,
process id, since when) beside it on the nodes, as {KEY}:holder (KEY:holder
if KEY has a {hash tag}), for 'redlock status' to show.

With --permits N (N ≥ 2), KEY names a counting semaphore instead (as
'consul lock -n'): at most N hosts run COMMAND at once, each holding one of
N permits, every one a lock of its own on {KEY}:permit:0 .. {KEY}:permit:N-1
(KEY:permit:I if KEY has a {hash tag}); the rest of this text applies to the
permit as to the lock. Every host must give the same N; 'redlock status --key'
shows a permit by its key. --fence-env gives the permit's token, which
increases from holder to holder of the same permit only.

With --shared (the habit of 'flock -s'), COMMAND runs as a reader of the
read/write lock KEY: any number of hosts with --shared run at once, while
none runs without it. Without --shared (and without --permits, which
names other keys), exec takes the read/write lock's write lock, which is
the lock KEY itself, so it excludes older exec versions too: it waits for
the readers to finish, and while it waits new readers wait behind it;
--min-hold keeps the write lock. Readers' holder records are not kept;
--fence-env gives a reader a token at least the last writer's and below
the next writer's. --shared does not combine with --min-hold or --permits.

COMMAND runs in a process group of its own under a small watchdog process.
SIGHUP, SIGINT, SIGQUIT and SIGTERM received by redlock are forwarded to the
group, which gets SIGKILL if COMMAND is still running --grace later; then the
lock is released. If redlock itself dies, even by SIGKILL, the group is
killed at once, and what COMMAND leaves running in its group is killed when
COMMAND exits. A process that leaves the group (setsid(1), a daemon that
detaches) is out of reach and runs on without the lock: keep the work in
COMMAND's group. COMMAND should not read from the terminal. Its stdin,
stdout and stderr are redlock's.

Nodes are redis:// or rediss:// URLs (redis://user:password@host:port/db), or
host:port, separated by commas, from --nodes or else $REDLOCK_NODES (keep
passwords there, not on the command line). Use an odd number of independent
masters, e.g. 3 or 5; two URLs for one server (127.0.0.1 and localhost, or
two database numbers), and an empty entry ("a,,b"), are refused.

Warnings: fewer than 3 nodes, and each node that failed while the lock was
taken or found busy (an error such as WRONGPASS, a host that does not
resolve, a node down or too slow), get one "redlock exec: warning:" line on
stderr, also when COMMAND runs and with --busy-exit 0: the lock still
works, but one more node down may stop it. --no-warnings silences them.

Once per cron tick, with --min-hold:
  With the same crontab on several hosts, a job shorter than the hosts' skew
  would run more than once per tick: the first host finishes and releases
  the lock before a host whose cron fires a little later looks. --min-hold D
  keeps the lock until D after it was taken, even when COMMAND ended sooner
  (redlock waits, then releases), so every host that fires within D of the
  first finds it busy. Pick D above the largest skew between the hosts
  (clock difference plus cron's start-up delay) and below the period minus
  that skew: the skew tolerated is the smaller of D and period − D, e.g.
  --min-hold 30s for a job run every minute tolerates 30s, --min-hold 5m for
  an hourly or nightly job tolerates 5m. Only the lock's TTL on the nodes and
  each host's own elapsed time are used; hosts' clocks are never compared.
  A COMMAND that runs past the next tick holds the lock, so that tick finds
  it busy and is skipped, not queued. A COMMAND that fails (non-zero status)
  also holds it until D: the tick is not run again elsewhere. With
  --release-on-failure the lock is released at once instead, so that a host
  still waiting for it (--wait, shorter than D) runs the tick again. A
  signal during the wait ends it without a release: the keys expire at --ttl.

Exit status:
  COMMAND's status  COMMAND ran with the lock held throughout (128+N if a
                    signal N killed it)
  64                bad usage: flags, node URLs (a port outside 1..65535, one
                    server named twice), missing COMMAND
  69                too few nodes answered to take the lock; what each node
                    answered is printed, and what to fix when a majority
                    answer what no retry fixes (a password, an ACL, a
                    replica: then at once, not after --wait)
  70                internal error
  75                the lock is busy: another holder kept it for all of
                    --wait (change with --busy-exit, e.g. 0 for cron); prints
                    nothing unless -v, but the warnings above
  79                the lock was lost while COMMAND ran; COMMAND was stopped
  126, 127          COMMAND could not be started, or was not found
  129, 130, 131, 143
                    SIGHUP, SIGINT, SIGQUIT or SIGTERM (128+N) came before
                    COMMAND started, or COMMAND was still running --grace
                    after it was forwarded and was killed
  COMMAND may itself exit with one of these numbers: with -v, redlock prints
  "redlock exec: COMMAND exited with status N" on stderr, which tells a
  COMMAND's own 75 or 79 from busy or lost.

Example:
  nodes=redis://:secret@10.0.0.1:6379,redis://:secret@10.0.0.2:6379
  export REDLOCK_NODES=$nodes,redis://:secret@10.0.0.3:6379
  redlock exec --key nightly-report --ttl 30s --fence-env REPORT_FENCE -- \
    /usr/local/bin/build-report --all

  # crontab, the same on every host: one run per night, silent on the others
  # (a full path: cron's PATH is /usr/bin:/bin); one line, split here:
  0 2 * * * /usr/local/bin/redlock exec --key nightly-report --ttl 30s
    --min-hold 5m --busy-exit 0 -- /usr/local/bin/build-report --all

Flags:
`

// execFlags are the parsed flags of the exec subcommand.
type execFlags struct {
	nodes            []string
	key              string
	ttl              time.Duration
	wait             time.Duration
	extendEvery      time.Duration
	grace            time.Duration
	nodeTimeout      time.Duration
	quarantine       time.Duration
	minHold          time.Duration
	permits          int
	shared           bool
	releaseOnFailure bool
	fenceEnv         string
	busyExit         int
	verbose          bool
	noWarnings       bool
	command          []string
}

// parseExecFlags parses args. On --help it prints the help to stdout; on bad
// usage it prints the problem to stderr. ok is false in both cases, and code
// is the exit status to return.
func parseExecFlags(args []string, stdout, stderr io.Writer) (f execFlags, code int, ok bool) {
	fs := flag.NewFlagSet("redlock exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.String("nodes", "", "comma-separated node URLs or host:port (default $"+nodesEnv+")")
	fs.StringVar(&f.key, "key", "", "the lock's key on the nodes (required)")
	durationVar(fs, &f.ttl, "ttl", 30*time.Second, "lock TTL: how long the lock outlives a crashed holder")
	durationVar(fs, &f.wait, "wait", 0, "how long to wait for a busy lock (0: give up at once, like flock -n)")
	durationVar(fs, &f.extendEvery, "extend-every", 0, "extension interval while COMMAND runs (default ttl/3)")
	durationVar(fs, &f.grace, "grace", 10*time.Second, "time between a forwarded signal or SIGTERM (lock lost) and SIGKILL; once the lock is lost, at most until the kill guard before its validity ends (see above)")
	durationVar(fs, &f.nodeTimeout, "node-timeout", 0, "per-node timeout of each request (default 1% of ttl, 100ms..1s)")
	durationVar(fs, &f.quarantine, "quarantine", redlock.DefaultQuarantine, "the amnesia guard's quarantine, for nodes that may lose their data; 0 turns the guard off, safe only if every node fsyncs every write or stays down longer than the longest TTL (see docs/amnesia.md)")
	durationVar(fs, &f.minHold, "min-hold", 0, "keep the lock until this long after it was taken, even if COMMAND ends sooner: one run per cron tick (see above)")
	fs.IntVar(&f.permits, "permits", 1, "run COMMAND on at most this many hosts at once: KEY names a semaphore of that many permits (see above)")
	fs.BoolVar(&f.shared, "shared", false, "run COMMAND as a reader of the read/write lock KEY, beside other readers (see above)")
	fs.BoolVar(&f.releaseOnFailure, "release-on-failure", false, "with --min-hold: release at once when COMMAND fails, so that a waiting host runs the tick again")
	fs.StringVar(&f.fenceEnv, "fence-env", "", "put the lock's fencing token in COMMAND's environment under this name")
	fs.IntVar(&f.busyExit, "busy-exit", exitBusy, "exit status when the lock is busy")
	fs.BoolVar(&f.verbose, "v", false, "log every attempt, extension and release, a busy lock and COMMAND's status to stderr")
	fs.BoolVar(&f.noWarnings, "no-warnings", false, "print no warning about fewer than 3 nodes or about nodes that failed while the lock was taken (see above)")
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
	f.command = fs.Args()
	var err error
	f.nodes, err = nodesFlag(*nodes)
	if err == nil {
		err = f.check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock exec: %v\nRun 'redlock exec --help' for usage.\n", err)
		return f, exitUsage, false
	}
	return f, 0, true
}

// check reports the first problem with the flags: the CLI's own rules, then
// the library's (redlock.CheckTTL, as Acquire and KeepAlive will apply
// them), with one flag more at each step so that the message names the flag
// that breaks one.
func (f execFlags) check() error {
	switch {
	case len(f.nodes) == 0:
		return fmt.Errorf("no nodes: give --nodes or set $%s", nodesEnv)
	case f.key == "":
		return errors.New("--key is required")
	case len(f.command) == 0:
		return errors.New("no COMMAND given")
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--wait", f.wait}, {"--grace", f.grace}, {"--extend-every", f.extendEvery},
		{"--node-timeout", f.nodeTimeout}, {"--quarantine", f.quarantine}, {"--min-hold", f.minHold},
	} {
		if d.value < 0 {
			return fmt.Errorf("%s %v must not be negative", d.flag, d.value)
		}
	}
	switch {
	case f.releaseOnFailure && f.minHold == 0:
		return errors.New("--release-on-failure needs --min-hold (without it the lock is always released when COMMAND ends)")
	case f.shared && (f.minHold > 0 || f.permits > 1):
		return errors.New("--shared does not combine with --min-hold or --permits")
	case f.permits < 1 || f.permits > redlock.MaxPermits:
		return fmt.Errorf("--permits %d must be in 1..%d", f.permits, redlock.MaxPermits)
	case f.busyExit < 0 || f.busyExit > 255:
		return fmt.Errorf("--busy-exit %d must be in 0..255", f.busyExit)
	case strings.ContainsAny(f.fenceEnv, "=\x00"):
		return fmt.Errorf("--fence-env %q is not a valid environment variable name", f.fenceEnv)
	}
	return f.checkTTL()
}

// checkTTL checks --ttl with the options the other flags add, one flag at a
// time, so that an error names the flag that made the TTL unusable.
func (f execFlags) checkTTL() error {
	var opts []redlock.DoOption
	for _, c := range []struct {
		flag  string
		value time.Duration
		opts  []redlock.DoOption
	}{
		{"--ttl", f.ttl, asDoOptions(f.timeoutOptions())},
		{"--quarantine", f.quarantine, asDoOptions(f.guardOptions())},
		{"--extend-every", f.extendEvery, asDoOptions(f.holdOptions())},
	} {
		opts = append(opts, c.opts...)
		if err := redlock.CheckTTL(f.ttl, opts...); err != nil {
			return fmt.Errorf("%s %v: %w", c.flag, c.value, err)
		}
	}
	return f.checkKillGuard()
}

// checkKillGuard checks that the kill guard (execjob.KillGuard: COMMAND
// gets SIGKILL that long before the lock's validity ends unless an
// extension has succeeded) leaves room for an extension that starts on
// schedule and takes the whole per-node timeout.
func (f execFlags) checkKillGuard() error {
	every := f.extendEvery
	if every == 0 {
		every = f.ttl / 3
	}
	timeout, guard := nodeTimeout(f.nodeTimeout, f.ttl), execjob.KillGuard(f.ttl)
	validity := f.ttl - redlock.Drift(f.ttl, redlock.DefaultDriftFactor)
	if every+timeout+guard < validity {
		return nil
	}
	return fmt.Errorf("--ttl %v is too short for the kill guard: COMMAND gets SIGKILL %v before the lock's validity (%v) ends unless an extension has succeeded, "+
		"and an extension started after %v (--extend-every) may take %v (--node-timeout): give a longer --ttl, or a shorter --extend-every or --node-timeout",
		f.ttl, guard, validity, every, timeout)
}

// asDoOptions returns opts as options of a call that both acquires and
// holds a lock (redlock.CheckTTL, Campaign).
func asDoOptions[O redlock.DoOption](opts []O) []redlock.DoOption {
	out := make([]redlock.DoOption, len(opts))
	for i, o := range opts {
		out[i] = o
	}
	return out
}

// timeoutOptions sets the per-node timeout, when --node-timeout is given.
func (f execFlags) timeoutOptions() []redlock.Option {
	if f.nodeTimeout > 0 {
		return []redlock.Option{redlock.WithNodeTimeout(f.nodeTimeout)}
	}
	return nil
}

// lockOptions are the library options the flags set on the Client: the
// per-node timeout and the amnesia guard's quarantine.
func (f execFlags) lockOptions() []redlock.Option {
	return append(f.timeoutOptions(), f.guardOptions()...)
}

// guardOptions sets the amnesia guard's quarantine, or turns the guard off
// for --quarantine 0.
func (f execFlags) guardOptions() []redlock.Option {
	if f.quarantine == 0 {
		return []redlock.Option{redlock.WithoutAmnesiaGuard()}
	}
	return []redlock.Option{redlock.WithQuarantine(f.quarantine)}
}

// holdOptions are the library options the flags set on the Lease: the
// extension interval, when --extend-every is given.
func (f execFlags) holdOptions() []redlock.HoldOption {
	if f.extendEvery > 0 {
		return []redlock.HoldOption{redlock.WithExtendInterval(f.extendEvery)}
	}
	return nil
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
	printDefaults(fs)
}

// nodesFlag returns the nodes of --nodes, or of $REDLOCK_NODES when the flag
// is empty; an error names the one it read.
func nodesFlag(flagValue string) ([]string, error) {
	source := "--nodes"
	if flagValue == "" {
		flagValue, source = os.Getenv(nodesEnv), "$"+nodesEnv
	}
	if strings.TrimSpace(flagValue) == "" {
		return nil, nil // the caller says how to give them
	}
	nodes, err := redlock.ParseNodes(flagValue)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return nodes, nil
}

// nodeTimeout is the per-node timeout of every request, the library's and
// the CLI's own (INFO server at first contact, the holder record):
// --node-timeout, else the library's default for the TTL, 1% of it within
// [100 ms, 1 s] (redlock.WithNodeTimeout).
func nodeTimeout(flagValue, ttl time.Duration) time.Duration {
	if flagValue > 0 {
		return flagValue
	}
	return min(max(ttl/100, 100*time.Millisecond), time.Second)
}

// openNodes dials the nodes through the library and through the CLI's own
// connections, each request of the latter within timeout, refuses two URLs
// of one address (nodeConns.sameAddress), and starts the first contact (nodeConns.startContact), whose answers the caller waits
// for when it needs them. On failure it prints why and returns the exit
// status.
func openNodes(ctx context.Context, name string, urls []string, timeout time.Duration, stderr io.Writer, opts ...redlock.Option) (*redlock.Client, *nodeConns, int) {
	quietRedis()
	client, err := redlock.Dial(urls, opts...)
	if err != nil { // the error names the node, without its password
		fmt.Fprintf(stderr, "redlock %s: %v\n", name, err)
		return nil, nil, exitUsage
	}
	conns, err := dialNodes(urls, timeout)
	if err == nil {
		if err = conns.sameAddress(); err != nil {
			conns.close()
		}
	}
	if err != nil {
		_ = client.Close()
		fmt.Fprintf(stderr, "redlock %s: %v\n", name, err)
		if errors.Is(err, errSameServer) {
			return nil, nil, exitUsage
		}
		return nil, nil, exitSoftware
	}
	conns.health = client.Health
	conns.startContact(context.WithoutCancel(ctx))
	return client, conns, 0
}

// syncWriter serializes the writes of the goroutines that print exec's
// notices (the job's own output does not go through it when stderr is a
// file).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// jobOutput is where the job writes: w itself when it is a file (the job
// then writes to the same file descriptor, as with a shell), else msgs.
func jobOutput(w io.Writer, msgs io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return msgs
}

// runExec implements `redlock exec`: it returns the process exit status.
func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseExecFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	// Our own subscription, next to main's signal.NotifyContext: it tells
	// which signal arrived, so that exactly that one is forwarded.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	jobStderr := stderr
	msgs := &syncWriter{w: stderr}
	stderr = msgs
	f.warnFewNodes(stderr)
	extended := make(chan struct{}, 1)
	client, conns, code := openNodes(ctx, "exec", f.nodes, nodeTimeout(f.nodeTimeout, f.ttl), stderr, f.clientOptions(stderr, extended)...)
	if client == nil {
		return code
	}
	defer client.Close()
	defer conns.close()

	lock, code := acquireForExec(ctx, client, conns, f, sigs, stderr)
	if lock == nil {
		return code
	}
	if f.permits > 1 {
		f.key = lock.Key() // the holder record sits beside the permit's key
	}
	// The CLI's own bookkeeping never delays COMMAND: the holder record is
	// written, and the nodes the vote did not wait for are reported, beside
	// it.
	var beside sync.WaitGroup
	defer beside.Wait() // before conns.close
	later := f.warnNodes(stderr, conns, lock.Nodes())
	beside.Go(func() { f.warnLate(stderr, conns, later) })
	// Then one line per node whose health changes while the job runs.
	nodeHealth := &healthReporter{health: client.Health, conns: conns, w: stderr, cmd: "exec", quiet: f.noWarnings}
	warned, _ := conns.failures(lock.Nodes())
	nodeHealth.check(warned...)
	defer nodeHealth.watch()()
	bg := context.WithoutCancel(ctx)
	who := newHolder(lock)
	written := make(chan struct{})
	beside.Go(func() {
		defer close(written)
		if !f.shared { // readers share the lock: no one holder to record (refresh and delete find none of theirs)
			conns.writeHolder(bg, f.key, who, f.ttl)
		}
	})
	deleteHolder := func() {
		<-written // else the write could land after the delete
		conns.deleteHolder(bg, f.key, who)
	}
	lease, stopKeeping, err := keepHeld(bg, lock, conns, f, who, extended)
	if err != nil {
		_ = lock.Release(bg)
		deleteHolder()
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return exitSoftware
	}
	defer stopKeeping()

	code, held := runCommand(ctx, f, lease, conns, sigs, stdout, jobOutput(jobStderr, msgs), stderr)
	if held && !holdFor(ctx, f, lock.AcquiredAt(), code, lease, sigs, stderr) {
		return code // the keys, and the holder record, expire at their TTL
	}
	if err := lease.Release(bg); err != nil && code != exitLost {
		// COMMAND's work is done; the keys that remain expire at the TTL.
		fmt.Fprintf(stderr, "redlock exec: warning: release: %v\n", err)
	}
	deleteHolder()
	return code
}

// clientOptions are the library options of exec's Client: its log lines go
// to stderr (every attempt, extension and release with -v, else errors
// only: exec prints its own one-line notices), a signal on extended after
// each successful extension (without blocking), and those the flags set.
func (f execFlags) clientOptions(stderr io.Writer, extended chan<- struct{}) []redlock.Option {
	level := slog.LevelError
	if f.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	onExtend := redlock.WithObserver(redlock.ObserverFunc(func(ev redlock.Event) {
		if ev.Op == redlock.OpExtend && ev.OK {
			select {
			case extended <- struct{}{}:
			default:
			}
		}
	}))
	return append([]redlock.Option{redlock.WithLogger(logger), onExtend}, f.lockOptions()...)
}

// keepHeld starts the Lease that extends lock while COMMAND runs, and the
// goroutine that makes the holder record follow its extensions (extended,
// see clientOptions). ctx must not be main's: when a signal cancels that,
// COMMAND is only asked to stop, and the lock must stay held until it has.
// stop ends the Lease without a release and waits for the goroutine.
func keepHeld(ctx context.Context, lock *redlock.Lock, conns *nodeConns, f execFlags, who holder, extended <-chan struct{}) (lease *redlock.Lease, stop func(), err error) {
	keepCtx, stopKeeping := context.WithCancel(ctx)
	lease, err = lock.KeepAlive(keepCtx, f.holdOptions()...)
	if err != nil {
		stopKeeping()
		return nil, nil, err
	}
	refreshDone := make(chan struct{})
	go func() {
		defer close(refreshDone)
		for {
			select {
			case <-extended:
				conns.refreshHolder(ctx, f.key, who, f.ttl)
			case <-lease.Done():
				return
			}
		}
	}()
	return lease, func() { stopKeeping(); <-refreshDone }, nil
}

// leaseEnd is what holdFor watches of the Lease: *redlock.Lease.
type leaseEnd interface {
	Done() <-chan struct{}
	Err() error
}

// holdFor keeps the lock after COMMAND ended with status code until
// --min-hold has passed since it was acquired (see execHelp). It returns
// false if a signal or ctx ended the wait: the lock is then not released.
func holdFor(ctx context.Context, f execFlags, acquired time.Time, code int, lease leaseEnd, sigs <-chan os.Signal, stderr io.Writer) bool {
	left := f.minHold - time.Since(acquired)
	if f.minHold == 0 || left <= 0 {
		return true
	}
	if code != 0 && f.releaseOnFailure {
		if f.verbose {
			fmt.Fprintf(stderr, "redlock exec: COMMAND failed: releasing the lock now (--release-on-failure)\n")
		}
		return true
	}
	if f.verbose {
		fmt.Fprintf(stderr, "redlock exec: holding the lock %v more (--min-hold %v)\n", left.Round(time.Millisecond), f.minHold)
	}
	t := time.NewTimer(left)
	defer t.Stop()
	var why any // the signal, or ctx's cause when no signal came
	select {
	case <-t.C:
		return true
	case <-lease.Done():
		fmt.Fprintf(stderr, "redlock exec: warning: %v during --min-hold, after COMMAND had ended\n", lease.Err())
		return true
	case s := <-sigs:
		why = s
	case <-ctx.Done():
		// A signal cancels ctx and reaches sigs at about the same time,
		// in either order: sigs says which one came.
		if s := execjob.CancelSignal(sigs); s != nil {
			why = s
		} else {
			why = context.Cause(ctx)
		}
	}
	fmt.Fprintf(stderr, "redlock exec: %v during --min-hold: leaving the lock to expire\n", why)
	return false
}

// acquireForExec takes the lock, retrying while it is busy until --wait has
// passed; a signal ends the wait. It returns the lock, or nil and the exit
// status.
func acquireForExec(ctx context.Context, client *redlock.Client, conns *nodeConns, f execFlags, sigs <-chan os.Signal, stderr io.Writer) (*redlock.Lock, int) {
	wctx, stopWatching := watchSignals(ctx, sigs)
	lock, err := acquireKey(wctx, client, f)
	if sig := stopWatching(); sig != nil {
		if lock != nil {
			_ = lock.Release(context.WithoutCancel(ctx))
		}
		fmt.Fprintf(stderr, "redlock exec: %v before the lock was taken\n", sig)
		return nil, 128 + signalNumber(sig)
	}
	if err != nil {
		// No job waits: the whole first contact is heard, so that a
		// server named twice is bad usage rather than a busy lock.
		if dup := conns.contact.waitAll(); dup != nil {
			fmt.Fprintf(stderr, "redlock exec: %v\n", dup)
			return nil, exitUsage
		}
		return nil, notAcquired(ctx, conns, f, err, stderr)
	}
	// The votes the lock counted must come from distinct servers: those
	// nodes' first contact is awaited (they have answered the lock
	// already, so theirs has come or comes within one per-node timeout),
	// and no other node's.
	if dup := conns.contact.wait(conns.granted(lock.Nodes())); dup != nil {
		_ = lock.Release(context.WithoutCancel(ctx))
		fmt.Fprintf(stderr, "redlock exec: %v\n", dup)
		return nil, exitUsage
	}
	return lock, 0
}

// acquireKey takes the lock on --key (the write lock of the read/write lock
// --key, or a read lock with --shared), or with --permits one permit of the
// semaphore --key, retrying while busy until --wait has passed. --min-hold
// takes the write lock too (exec holds it on after COMMAND, holdFor), so
// that it never runs beside --shared readers: the plain lock on --key would
// exclude new readers but not wait for those that hold.
func acquireKey(ctx context.Context, client *redlock.Client, f execFlags) (*redlock.Lock, error) {
	retry := redlock.WithRetry(retryWithin(f.wait))
	if f.permits <= 1 {
		// The read/write lock's writer is the lock on f.key itself.
		rw, err := client.RWMutex(f.key)
		if err != nil {
			return nil, err
		}
		lock := rw.Lock
		if f.shared {
			lock = rw.RLock
		}
		l, err := lock(ctx, f.ttl, retry)
		if err != nil {
			return nil, err
		}
		return l.Lock, nil
	}
	sem, err := client.Semaphore(f.key, f.permits)
	if err != nil {
		return nil, err
	}
	p, err := sem.Acquire(ctx, f.ttl, retry)
	if err != nil {
		return nil, err
	}
	return p.Lock, nil
}

// retryWithin is the library's DefaultRetry cut off at wait from now: the
// last attempt starts at the latest at that deadline, and runs to its end
// (a context deadline would cut it short, its nodes' answers unknown, and a
// busy lock could then read as unreachable nodes). wait 0 makes one attempt,
// as TryAcquire.
func retryWithin(wait time.Duration) redlock.RetryPolicy {
	deadline := time.Now().Add(wait)
	backoff := redlock.DefaultRetry()
	return redlock.RetryFunc(func(attempt int) (time.Duration, bool) {
		left := time.Until(deadline)
		if left <= 0 {
			return 0, false
		}
		delay, _ := backoff.NextRetry(attempt) // DefaultRetry never gives up
		return min(delay, left), true
	})
}

// watchSignals returns a context derived from ctx that a signal on sigs
// cancels, and stop, which stops watching and returns the signal that came
// (nil if none). A cancellation of ctx counts as the signal that caused it
// (execjob.CancelSignal): main's ctx and sigs hear of one signal in either
// order.
func watchSignals(ctx context.Context, sigs <-chan os.Signal) (wctx context.Context, stop func() os.Signal) {
	wctx, cancel := context.WithCancel(ctx)
	var got os.Signal // written by the watcher, read once it has ended
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		select {
		case got = <-sigs:
			return
		case <-quit:
		}
		if ctx.Err() != nil {
			got = execjob.CancelSignal(sigs)
			return
		}
		select { // a signal as the acquisition ended
		case got = <-sigs:
		default:
		}
	}()
	return wctx, func() os.Signal {
		close(quit)
		<-done
		return got
	}
}

// notAcquired reports a failed acquisition and returns the exit status:
// bad usage, busy (another owner holds the lock: redlock.ErrTaken), or too
// few nodes answered, with what each node answered.
func notAcquired(ctx context.Context, conns *nodeConns, f execFlags, err error, stderr io.Writer) int {
	var qe *redlock.QuorumError
	switch {
	case errors.Is(err, redlock.ErrInvalidArgument):
		fmt.Fprintf(stderr, "redlock exec: %v\n", err)
		return exitUsage
	case errors.Is(err, redlock.ErrTaken), ctx.Err() != nil:
		// Silent by default: the normal outcome on every host but one of a
		// cron job, and cron mails any output. A failing node is not
		// "busy": it is reported all the same.
		if errors.As(err, &qe) && errors.Is(err, redlock.ErrTaken) {
			f.warnNodes(stderr, conns, qe.Nodes)
		}
		if f.verbose {
			fmt.Fprintf(stderr, "redlock exec: lock busy: %v\n", err)
		}
		return f.busyExit
	case errors.As(err, &qe) && errors.Is(err, redlock.ErrNotAcquired):
		fmt.Fprintf(stderr, "redlock exec: too few nodes answered to take the lock %q (%d of %d nodes needed):\n", f.key, qe.Quorum, len(qe.Nodes))
		conns.describeNodes(stderr, qe.Nodes, conns.askPending(ctx, qe.Nodes))
		if errors.Is(err, redlock.ErrMisconfigured) && qe.Cause != nil {
			// Not retried: the library's words name the node and what to fix.
			fmt.Fprintf(stderr, "redlock exec: %s\n", conns.redact(qe.Cause.Error()))
		}
		return exitUnavailable
	}
	fmt.Fprintf(stderr, "redlock exec: %v\n", conns.redact(err.Error()))
	return exitSoftware
}

// warnFewNodes warns, unless --no-warnings, when fewer than 3 nodes are
// given: a majority of 1 or 2 nodes is all of them, so one node down stops
// the lock.
func (f execFlags) warnFewNodes(stderr io.Writer) {
	if f.noWarnings || len(f.nodes) >= 3 {
		return
	}
	what := "a single node: the lock is down whenever it is"
	if len(f.nodes) == 2 {
		what = "2 nodes: the lock needs both (a majority of 2), so either one down stops it"
	}
	fmt.Fprintf(stderr, "redlock exec: warning: %s; use an odd number of independent masters, at least 3\n", what)
}

// warnNodes prints, unless --no-warnings, one warning line per node that
// failed in the acquisition whose outcomes are nodes (nodeConns.failures):
// the lock was taken, or found busy, without it, and one node less can
// stop the next run. It returns the nodes whose first contact has not
// ended yet, for warnLate.
func (f execFlags) warnNodes(stderr io.Writer, conns *nodeConns, nodes []redlock.NodeResult) (later []int) {
	lines, later := conns.failures(nodes)
	if f.noWarnings {
		return later
	}
	for _, line := range lines {
		fmt.Fprintf(stderr, "redlock exec: warning: %s\n", line)
	}
	return later
}

// warnLate waits for the rest of the first contact (at most one per-node
// timeout from its start) while COMMAND runs, and prints a warning for
// each node of later that failed it (unless --no-warnings) and for two
// nodes that turn out to be one server (always: the next acquisition
// could count that server twice).
func (f execFlags) warnLate(stderr io.Writer, conns *nodeConns, later []int) {
	lines := conns.lateFailures(later)
	if !f.noWarnings {
		for _, line := range lines {
			fmt.Fprintf(stderr, "redlock exec: warning: %s\n", line)
		}
	}
	if err := conns.contact.waitAll(); err != nil {
		fmt.Fprintf(stderr, "redlock exec: warning: %v: fix the node list\n", err)
	}
}

// forwardedSignals are the signals redlock exec passes on to COMMAND.
var forwardedSignals = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM}

// runCommand starts COMMAND under its watchdog, its stderr on jobStderr,
// and supervises it (execjob.Supervise): it forwards signals to it, stops it if the lease ends
// (the lock is lost) or --grace after a forwarded signal, and returns the
// exit status. held reports whether COMMAND ran and exited on its own with
// the lock held throughout, so that --min-hold applies.
func runCommand(ctx context.Context, f execFlags, lease *redlock.Lease, conns *nodeConns, sigs <-chan os.Signal, stdout, jobStderr, stderr io.Writer) (code int, held bool) {
	env := os.Environ()
	if f.fenceEnv != "" {
		env = append(env, f.fenceEnv+"="+strconv.FormatUint(lease.Lock().Token(), 10))
	}
	j, err := startJob(f.command, env, stdout, jobStderr)
	if err != nil {
		fmt.Fprintf(stderr, "redlock exec: cannot start the job watchdog: %v\n", err)
		return exitSoftware, false
	}
	return execjob.Supervise(ctx, j, execjob.Config{
		Lease: lease, Grace: f.grace, Signals: sigs, Stderr: stderr, Verbose: f.verbose,
		DescribeNodes: func(w io.Writer, nodes []redlock.NodeResult) { conns.describeNodes(w, nodes, nil) },
	})
}

// exitStatus returns a process's exit status the way a shell reports it:
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

func signalNumber(s os.Signal) int { return execjob.SignalNumber(s) }
