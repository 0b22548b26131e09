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
	"syscall"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/execjob"
)

const electHelp = `Usage: redlock elect [flags] [--] COMMAND [ARGS...]

Runs COMMAND on exactly one of several replicas: each replica runs
'redlock elect' with the same --name, and the one elected leader (the holder
of the election's lock on a majority of the Redis nodes) runs COMMAND, with
its term in the environment (--term-env, default REDLOCK_TERM): a number
greater than every earlier leader's, to pass to what COMMAND writes so that
a deposed leader's late writes are refused (docs/election.md). The
leadership is extended in the background (every --extend-every).

If the leadership is lost (an extension fails, or its validity runs out
first), COMMAND is sent SIGTERM, then SIGKILL after --grace or the kill
guard (as for 'redlock exec') before the leadership's validity runs out,
whichever comes first; redlock then
campaigns again and, once elected again, starts COMMAND again with the new
term. Losing leadership never ends redlock elect.

When COMMAND exits on its own, redlock resigns, which hands the leadership to
another replica at once (it does not wait for the TTL), and exits with
COMMAND's status; let a supervisor (systemd Restart=always) start it again.
SIGHUP, SIGINT, SIGQUIT and SIGTERM are forwarded to COMMAND (SIGKILL --grace
later); redlock resigns once COMMAND has exited. Before it is elected, such
a signal ends redlock elect at once.

COMMAND runs in a process group of its own under the same watchdog as
'redlock exec': if redlock itself dies, even by SIGKILL, the group is killed
at once, and what COMMAND leaves in its group is killed when it exits. Nodes
are given as for 'redlock exec' (--nodes or $REDLOCK_NODES). 'redlock status
--key "{NAME}:leader"' shows the election on every node, with the leader's
identity (--json: "identity").

Exit status:
  COMMAND's status  COMMAND exited on its own, or after a forwarded signal
                    (128+N if signal N killed it); redlock resigned
  64                bad usage: flags, node URLs, missing COMMAND
  69                before this replica was elected, a majority of the nodes
                    answered what no retry fixes (a password, an ACL, a
                    replica: at once, with what to fix), or none answered
                    for the library's outage limit (30s)
  70                internal error
  126, 127          COMMAND could not be started, or was not found
  129, 130, 131, 143
                    SIGHUP, SIGINT, SIGQUIT or SIGTERM (128+N) came before
                    this replica was elected, or COMMAND was still running
                    --grace after it was forwarded and was killed
  redlock elect never exits because the leadership was lost: it stops
  COMMAND and campaigns again.

Example:
  export REDLOCK_NODES=10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
  # on every replica:
  redlock elect --name scheduler --ttl 10s -- \
    /usr/local/bin/scheduler --term-from-env

Flags:
`

// electFlags are the parsed flags of the elect subcommand.
type electFlags struct {
	nodes       []string
	name        string
	identity    string
	ttl         time.Duration
	extendEvery time.Duration
	grace       time.Duration
	nodeTimeout time.Duration
	quarantine  time.Duration
	termEnv     string
	idEnv       string
	verbose     bool
	command     []string
}

func parseElectFlags(args []string, stdout, stderr io.Writer) (f electFlags, code int, ok bool) {
	fs := flag.NewFlagSet("redlock elect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.String("nodes", "", "comma-separated node URLs or host:port (default $"+nodesEnv+")")
	fs.StringVar(&f.name, "name", "", "the election's name, the same on every replica (required)")
	fs.StringVar(&f.identity, "identity", defaultIdentity(), "this replica's identity, shown as the leader's")
	durationVar(fs, &f.ttl, "ttl", 15*time.Second, "leadership TTL: how long a crashed leader keeps the others waiting")
	durationVar(fs, &f.extendEvery, "extend-every", 0, "extension interval while leading (default ttl/3)")
	durationVar(fs, &f.grace, "grace", 10*time.Second, "time between a forwarded signal or SIGTERM (leadership lost) and SIGKILL; once lost, at most until the kill guard before the leadership's validity ends")
	durationVar(fs, &f.nodeTimeout, "node-timeout", 0, "per-node timeout of each request (default 1% of ttl, 100ms..1s)")
	durationVar(fs, &f.quarantine, "quarantine", redlock.DefaultQuarantine, "the amnesia guard's quarantine, for nodes that may lose their data; 0 turns the guard off, safe only if every node fsyncs every write or stays down longer than the longest TTL (see docs/amnesia.md)")
	fs.StringVar(&f.termEnv, "term-env", "REDLOCK_TERM", "put the leadership's term in COMMAND's environment under this name")
	fs.StringVar(&f.idEnv, "identity-env", "REDLOCK_IDENTITY", "put this replica's identity in COMMAND's environment under this name")
	fs.BoolVar(&f.verbose, "v", false, "log every attempt, extension and release, each election and loss, and COMMAND's status to stderr")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, fs, electHelp)
			return f, 0, false
		}
		fmt.Fprintln(stderr, "Run 'redlock elect --help' for usage.")
		return f, exitUsage, false
	}
	f.command = fs.Args()
	var err error
	f.nodes, err = nodesFlag(*nodes)
	if err == nil {
		err = f.check()
	}
	if err != nil {
		fmt.Fprintf(stderr, "redlock elect: %v\nRun 'redlock elect --help' for usage.\n", err)
		return f, exitUsage, false
	}
	return f, 0, true
}

// defaultIdentity is "host:pid".
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return host + ":" + strconv.Itoa(os.Getpid())
}

func (f electFlags) check() error {
	switch {
	case len(f.nodes) == 0:
		return fmt.Errorf("no nodes: give --nodes or set $%s", nodesEnv)
	case f.name == "":
		return errors.New("--name is required")
	case len(f.command) == 0:
		return errors.New("no COMMAND given")
	case f.termEnv == "" || strings.ContainsAny(f.termEnv, "=\x00"):
		return fmt.Errorf("--term-env %q is not a valid environment variable name", f.termEnv)
	case strings.ContainsAny(f.idEnv, "=\x00"):
		return fmt.Errorf("--identity-env %q is not a valid environment variable name", f.idEnv)
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--grace", f.grace}, {"--extend-every", f.extendEvery},
		{"--node-timeout", f.nodeTimeout}, {"--quarantine", f.quarantine},
	} {
		if d.value < 0 {
			return fmt.Errorf("%s %v must not be negative", d.flag, d.value)
		}
	}
	ef := execFlags{ttl: f.ttl, nodeTimeout: f.nodeTimeout, quarantine: f.quarantine, extendEvery: f.extendEvery}
	return ef.checkTTL()
}

// runElect implements `redlock elect`: it returns the process exit status.
func runElect(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, code, ok := parseElectFlags(args, stdout, stderr)
	if !ok {
		return code
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwardedSignals...)
	defer signal.Stop(sigs)

	ef := execFlags{ttl: f.ttl, nodeTimeout: f.nodeTimeout, quarantine: f.quarantine, extendEvery: f.extendEvery}
	level := slog.LevelError
	if f.verbose {
		level = slog.LevelDebug
	}
	opts := append([]redlock.Option{redlock.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))}, ef.lockOptions()...)
	client, conns, code := openNodes(ctx, "elect", f.nodes, nodeTimeout(f.nodeTimeout, f.ttl), stderr, opts...)
	if client == nil {
		return code
	}
	defer client.Close()
	defer conns.close()
	// One line per node that is down or quarantined once elected, and
	// whenever a node's health changes.
	nodeHealth := &healthReporter{health: client.Health, conns: conns, w: stderr, cmd: "elect"}
	defer nodeHealth.watch()()

	for {
		l, stop, code := campaignForElect(ctx, client, f, ef, sigs, stderr)
		if l == nil {
			if code != exitSoftware && code != exitUnavailable {
				return code
			}
			// No job waits: a server named twice is bad usage.
			if dup := conns.contact.waitAll(); dup != nil {
				fmt.Fprintf(stderr, "redlock elect: %v\n", dup)
				return exitUsage
			}
			return code
		}
		// The votes that elected this replica must come from distinct
		// servers (the first contact ran beside the campaign).
		if dup := conns.contact.wait(conns.granted(l.Lease().Lock().Nodes())); dup != nil {
			_ = l.Resign(context.WithoutCancel(ctx))
			stop()
			fmt.Fprintf(stderr, "redlock elect: %v\n", dup)
			return exitUsage
		}
		nodeHealth.check()
		if f.verbose {
			fmt.Fprintf(stderr, "redlock elect: elected leader of %q as %q, term %d\n", f.name, f.identity, l.Term())
		}
		code, _ = runLeader(ctx, f, l, conns, sigs, stdout, stderr)
		lost := errors.Is(l.Err(), redlock.ErrLockLost) && code == exitLost
		if err := l.Resign(context.WithoutCancel(ctx)); err != nil && !lost && f.verbose {
			fmt.Fprintf(stderr, "redlock elect: warning: resign: %v\n", err)
		}
		stop()
		if !lost || ctx.Err() != nil {
			return code
		}
		fmt.Fprintf(stderr, "redlock elect: leadership of %q lost; campaigning again\n", f.name)
	}
}

// campaignForElect campaigns until elected; a signal ends the campaign.
// The leadership outlives ctx (main's, which a signal cancels): once
// elected, a signal is forwarded to COMMAND, and the leadership is kept
// until COMMAND has exited. stop ends the leadership's context once it was
// resigned. On failure l is nil and code the exit status.
func campaignForElect(ctx context.Context, client *redlock.Client, f electFlags, ef execFlags, sigs <-chan os.Signal, stderr io.Writer) (l *redlock.Leadership, stop func(), code int) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var got os.Signal
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case got = <-sigs:
			cancel()
		case <-ctx.Done():
			if got = execjob.CancelSignal(sigs); got == nil {
				got = syscall.SIGTERM
			}
			cancel()
		case <-quit:
		}
	}()
	l, err := client.Campaign(cctx, f.name, f.identity, f.ttl, asDoOptions(ef.holdOptions())...)
	close(quit)
	<-done
	if got != nil {
		if l != nil {
			_ = l.Resign(context.WithoutCancel(ctx))
		}
		cancel()
		fmt.Fprintf(stderr, "redlock elect: %v before this replica was elected\n", got)
		return nil, nil, 128 + signalNumber(got)
	}
	if err != nil {
		cancel()
		fmt.Fprintf(stderr, "redlock elect: %v\n", err)
		var qe *redlock.QuorumError
		switch {
		case errors.Is(err, redlock.ErrInvalidArgument):
			return nil, nil, exitUsage
		case errors.As(err, &qe) && errors.Is(err, redlock.ErrNotAcquired):
			// A majority refused what no retry fixes, or none answered
			// for the outage limit: the nodes, not redlock.
			return nil, nil, exitUnavailable
		}
		return nil, nil, exitSoftware
	}
	return l, cancel, 0
}

// runLeader starts COMMAND with the term in its environment, under its
// watchdog, and supervises it while l leads (execjob.Supervise, as exec).
func runLeader(ctx context.Context, f electFlags, l *redlock.Leadership, conns *nodeConns, sigs <-chan os.Signal, stdout, stderr io.Writer) (code int, held bool) {
	env := append(os.Environ(), f.termEnv+"="+strconv.FormatUint(l.Term(), 10))
	if f.idEnv != "" {
		env = append(env, f.idEnv+"="+f.identity)
	}
	j, err := startJob(f.command, env, stdout, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "redlock elect: cannot start the job watchdog: %v\n", err)
		return exitSoftware, false
	}
	return execjob.Supervise(ctx, j, execjob.Config{
		Lease: l.Lease(), Grace: f.grace, Signals: sigs, Stderr: stderr, Verbose: f.verbose,
		DescribeNodes: func(w io.Writer, nodes []redlock.NodeResult) { conns.describeNodes(w, nodes, nil) },
	})
}
