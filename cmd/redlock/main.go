// Command redlock runs the Redlock chaos harness, runs a command under a
// lock, and shows a lock's state on its nodes.
//
//	redlock chaos [flags]                  run the failure-mode scenarios (default: in-process nodes)
//	redlock exec --nodes URLS --key K -- COMMAND [ARGS...]
//	redlock elect --nodes URLS --name NAME -- COMMAND [ARGS...]
//	redlock status --nodes URLS --key K
//	redlock --version
//
// Run `redlock SUBCOMMAND --help` for each subcommand's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
)

const usage = `redlock: a lock held by a majority of N independent Redis nodes.

Usage:
  redlock chaos  [flags]       run the chaos scenarios and print where the lock is safe
                               (in-process nodes by default: no set-up)
  redlock exec   [flags] -- COMMAND [ARGS...]
                               run COMMAND only while holding the lock (a distributed flock)
  redlock elect  [flags] -- COMMAND [ARGS...]
                               run COMMAND on the elected leader of several replicas;
                               stop it when leadership is lost, campaign again
  redlock status [flags]       show a lock's state on every node
  redlock soak   [flags]       many clients on many keys for minutes while nodes fail;
                               nothing may overlap, leak or be left (starts redis-servers)

Run 'redlock SUBCOMMAND --help' for the flags and an example, and
'redlock --version' for the version.
`

func main() {
	if len(os.Args) > 1 && os.Args[1] == watchdogArg {
		os.Exit(runWatchdog(os.Args[2:])) // started by redlock exec, see watchdog.go
	}
	ctx, stop := signal.NotifyContext(context.Background(), forwardedSignals...)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches to a subcommand and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "chaos":
		if wantsHelp(args[1:]) {
			// chaos prints its help where it prints its errors: --help
			// goes to stdout for every subcommand.
			return runChaos(ctx, args[1:], stdout, stdout)
		}
		return runChaos(ctx, args[1:], stdout, stderr)
	case "exec":
		return runExec(ctx, args[1:], stdout, stderr)
	case "elect":
		return runElect(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "soak":
		return runSoak(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "-version", "--version", "version":
		fmt.Fprintln(stdout, "redlock", version())
		return 0
	}
	fmt.Fprintf(stderr, "redlock: unknown subcommand %q\n\n%s", args[0], usage)
	return exitUsage
}

// wantsHelp reports whether args ask for help (-h, -help or --help among
// the flags, before any "--").
func wantsHelp(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
			return true
		}
	}
	return false
}

// version returns the module version the binary was built from (as go
// install records it), or the VCS revision of a build in a clone.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := bi.Main.Version
	if v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	switch {
	case rev == "":
		return "(devel)"
	case dirty:
		return "(devel) " + rev + "+dirty"
	}
	return "(devel) " + rev
}
