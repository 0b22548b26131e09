// Command redlock runs the Redlock chaos harness, runs a command under a
// lock, and shows a lock's state on its nodes.
//
//	redlock chaos [flags]                  run the failure-mode scenarios (default: in-process nodes)
//	redlock exec --nodes URLS --key K -- COMMAND [ARGS...]
//	redlock status --nodes URLS --key K
//
// Run `redlock SUBCOMMAND --help` for each subcommand's flags.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `redlock: a lock held by a majority of N independent Redis nodes.

Usage:
  redlock chaos  [flags]       run the chaos scenarios and print where the lock is safe
                               (in-process nodes by default: no set-up)
  redlock exec   [flags] -- COMMAND [ARGS...]
                               run COMMAND only while holding the lock (a distributed flock)
  redlock status [flags]       show a lock's state on every node

Run 'redlock SUBCOMMAND --help' for the flags and an example.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
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
		return runChaos(ctx, args[1:], stdout, stderr)
	case "exec":
		return runExec(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "redlock: unknown subcommand %q\n\n%s", args[0], usage)
	return exitUsage
}
