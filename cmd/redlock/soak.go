package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"

	"github.com/d3b93e30/redlock/chaos"
)

const soakHelp = `Usage: redlock soak [flags]

Runs many clients on many keys against redis-servers it starts (and stops),
for minutes, while a fault schedule kills -9 and restarts nodes (with and
without their data), stops them (SIGSTOP), delays and blackholes their
links, restarts a majority one node after another, and freezes clients for
longer than the TTL. Every hold writes its fencing token to its key's fenced
register; the chaos oracle judges the holds and writes of every key. It
prints a progress line every 5 s and, at the end, a summary table, and
writes an SVG plot over time (--svg).

Exit status: 0 when nothing overlapped, no fenced register took a stale
write, every key's tokens increased, no key was left and no resource grew;
1 otherwise; 2 when the soak could not run; 64 for bad flags.

Example (the full soak; 10 minutes):

  redlock soak --svg soak.svg

Flags:
`

// Exit statuses of redlock soak besides 0 and exitUsage.
const (
	exitSoakFailed = 1 // a defect, a key left or a leak
	exitSoakError  = 2 // the soak could not run
)

type soakFlags struct {
	opt      chaos.SoakOptions
	mix      string
	svg      string
	dataDir  string
	progress time.Duration
}

func parseSoakFlags(args []string, stdout, stderr io.Writer) (soakFlags, error) {
	var f soakFlags
	fs := flag.NewFlagSet("redlock soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if wantsHelp(args) {
		fs.SetOutput(stdout)
	}
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), soakHelp)
		printDefaults(fs)
	}
	o := &f.opt
	fs.IntVar(&o.Clients, "clients", 1000, "client goroutines")
	fs.IntVar(&o.Conns, "conns", 8, "redlock.Client values the goroutines share (as processes would)")
	fs.IntVar(&o.Keys, "keys", 64, "lock keys; goroutine i works on key i mod keys")
	fs.IntVar(&o.Nodes, "nodes", chaos.DefaultNodes, "redis-servers to start (at least 3)")
	fs.IntVar(&o.PoolSize, "pool", 32, "connections each redlock.Client keeps to a node at most")
	durationVar(fs, &o.Duration, "duration", 10*time.Minute, "how long the clients run")
	durationVar(fs, &o.TTL, "ttl", time.Second, "lock TTL (at least 100ms)")
	durationVar(fs, &o.Hold, "hold", 20*time.Millisecond, "how long a holder works (do and elect hold TTL/2)")
	durationVar(fs, &o.Think, "think", 2*time.Second, "mean pause of a client between two operations")
	durationVar(fs, &o.NodeTimeout, "node-timeout", 0, "per-node timeout (default: the library's for the TTL)")
	durationVar(fs, &o.FaultEvery, "fault-every", 5*time.Second, "time from one fault to the next")
	durationVar(fs, &o.SampleEvery, "sample-every", 10*time.Second, "time between two samples of goroutines, heap and connections")
	durationVar(fs, &f.progress, "progress", 5*time.Second, "time between two progress lines (0: none)")
	fs.StringVar(&f.mix, "mix", "", "operation weights, e.g. acquire=6,try=3,do=1,semaphore=2,multi=1,elect=1 (the default)")
	fs.BoolVar(&o.NoPersistence, "no-persistence", false, "run the servers without their AOF (a kill-restart then loses the node's data)")
	fs.BoolVar(&o.NoFaults, "no-faults", false, "run the load without the fault schedule")
	fs.BoolVar(&o.Unsafe, "unsafe", false, "add the documented-unsafe faults (total amnesia, clock jump); what they cause is reported apart")
	fs.StringVar(&o.Mutant, "mutant", "", "make every client this mutant of the lock (needs -tags redlock_mutants; see redlock chaos --mutants)")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the mix and the fault schedule (default: from the clock; printed)")
	fs.StringVar(&o.RedisBinary, "redis-server", "", "path to redis-server (default: PATH)")
	fs.StringVar(&f.svg, "svg", "", "write the plot over time to this SVG file")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir(), "directory for the servers' data (their AOF is fsynced on every write)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return f, err
		}
		return f, errFlagReported
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if f.mix != "" {
		mix, err := chaos.ParseSoakMix(f.mix)
		if err != nil {
			return f, err
		}
		o.Mix = mix
	}
	if f.progress < 0 {
		return f, fmt.Errorf("--progress %v is negative", f.progress)
	}
	// Bad usage, before any server starts (Soak would refuse them later).
	if err := o.Check(); err != nil {
		return f, err
	}
	return f, nil
}

// defaultDataDir is /dev/shm when it is a writable directory (an fsync
// there costs nothing, so the servers' appendfsync always does not slow
// the soak to the disk's pace), else the system's temporary directory.
func defaultDataDir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "redlock-soak-probe-*"); err == nil {
			name := f.Name()
			_ = f.Close()
			_ = os.Remove(name)
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseSoakFlags(args, stdout, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		if !errors.Is(err, errFlagReported) {
			fmt.Fprintf(stderr, "redlock soak: %v\n", err)
		}
		return exitUsage
	}
	if f.opt.Seed == 0 {
		f.opt.Seed = uint64(time.Now().UnixNano())
	}
	// The servers' data directories are made under TMPDIR.
	if err := os.Setenv("TMPDIR", f.dataDir); err != nil {
		fmt.Fprintf(stderr, "redlock soak: --data-dir: %v\n", err)
		return exitUsage
	}
	// Killed and cut-off nodes are the point: go-redis's own log lines
	// would bury the progress.
	redis.SetLogger(&logging.VoidLogger{})
	fmt.Fprintf(stdout, "redlock soak: %d clients × %d keys on %d redis-servers for %v, seed %d\n",
		f.opt.Clients, f.opt.Keys, f.opt.Nodes, f.opt.Duration, f.opt.Seed)
	last := time.Time{}
	if f.progress > 0 {
		f.opt.Progress = func(p chaos.SoakProgress) {
			if now := time.Now(); now.Sub(last) >= f.progress {
				last = now
				fmt.Fprintln(stdout, p)
			}
		}
	}
	rep, err := chaos.Soak(ctx, f.opt)
	if err != nil {
		fmt.Fprintf(stderr, "redlock soak: %v\n", err)
		return exitSoakError
	}
	fmt.Fprintln(stdout)
	if err := chaos.WriteSoakSummary(stdout, rep); err != nil {
		fmt.Fprintf(stderr, "redlock soak: %v\n", err)
		return exitSoakError
	}
	if f.svg != "" {
		if err := writeSoakSVG(f.svg, rep); err != nil {
			fmt.Fprintf(stderr, "redlock soak: --svg: %v\n", err)
			return exitSoakError
		}
		fmt.Fprintf(stdout, "plot: %s\n", f.svg)
	}
	if ctx.Err() != nil {
		fmt.Fprintln(stderr, "redlock soak: interrupted")
		return exitSoakError
	}
	if !rep.OK() {
		return exitSoakFailed
	}
	return 0
}

func writeSoakSVG(path string, rep chaos.SoakReport) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	werr := chaos.WriteSoakSVG(out, rep)
	return errors.Join(werr, out.Close())
}
