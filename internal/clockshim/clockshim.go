// Package clockshim moves the real-time clock of a process it did not write:
// a small shared object, compiled at run time from the C source embedded
// here with the system's C compiler, is preloaded (LD_PRELOAD) into the
// process and adds to every real-time reading an offset that this package
// writes into a memory-mapped file, so the clock can step forward or back,
// or run fast or slow, while the process runs.
//
// The chaos harness uses it for the redis-server nodes it starts: key
// expiry and TIME then move for real. libfaketime cannot do this here: it
// resolves the real clock_gettime with dlsym, which allocates, and Debian's
// redis-server (jemalloc) reads the clock while allocating, so it aborts at
// start ("Cannot recover from unexpected recursive calls to
// clock_gettime()"). The shim reads the real clock with the raw system call
// instead and allocates nothing.
//
// What it moves: clock_gettime for CLOCK_REALTIME and CLOCK_REALTIME_COARSE,
// gettimeofday and time, in the process and its children. Every other clock
// (CLOCK_MONOTONIC, CLOCK_BOOTTIME, ...) passes through unchanged, as on a
// machine whose wall clock is stepped. Calls made inside the C library
// itself (not through its exported symbols) and raw system calls are not
// moved. Linux only.
package clockshim

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

//go:embed csrc/clockshim.c
var source []byte

// EnvFile is the environment variable that names the shared file to the
// preloaded shim.
const EnvFile = "CLOCKSHIM_FILE"

// The shared file's layout (struct clockshim_state in csrc/clockshim.c): five
// 64-bit words in native byte order.
const (
	wordSeq    = 0 // odd while Set changes the other words
	wordOffset = 1 // node time − real time at since, in ns
	wordSince  = 2 // real time (Unix ns) the rate applies from
	wordRate   = 3 // float64 bits: node seconds per real second
	wordMagic  = 4 // magic once initialised
	words      = 5
	magic      = 0x6d696873636f6c63 // "clocshim", little-endian
)

// Compiler returns the C compiler the shim is built with: $CC if set (a
// name on PATH or a path), else the first of cc, gcc and clang on PATH. The
// error says how to install one.
func Compiler() (string, error) {
	names := []string{"cc", "gcc", "clang"}
	if cc := strings.TrimSpace(os.Getenv("CC")); cc != "" {
		names = []string{cc}
	}
	var errs []error
	for _, n := range names {
		path, err := exec.LookPath(n)
		if err == nil {
			return path, nil
		}
		errs = append(errs, err)
	}
	return "", fmt.Errorf("clockshim: no C compiler found (install one with `apt-get install gcc libc6-dev`): %w", errors.Join(errs...))
}

// Build compiles the shim with Compiler into dir (which must exist) and
// returns the path of the shared object, dir/libclockshim.so. dir must not
// contain spaces or colons (LD_PRELOAD separates paths with them). It
// returns the error of Compiler, or the compiler's error with its output.
func Build(ctx context.Context, dir string) (string, error) {
	cc, err := Compiler()
	if err != nil {
		return "", err
	}
	dir, err = filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("clockshim: %w", err)
	}
	if strings.ContainsAny(dir, " :\t\n") {
		return "", fmt.Errorf("clockshim: directory %q has a space or colon, which LD_PRELOAD cannot carry", dir)
	}
	src := filepath.Join(dir, "clockshim.c")
	if err := os.WriteFile(src, source, 0o600); err != nil {
		return "", fmt.Errorf("clockshim: %w", err)
	}
	lib := filepath.Join(dir, "libclockshim.so")
	out, err := exec.CommandContext(ctx, cc, "-shared", "-fPIC", "-O2", "-Wall", "-o", lib, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("clockshim: %s failed: %w\n%s", cc, err, out)
	}
	return lib, nil
}

// Clock is the shared file one process's clock reads: node time = real
// time + offset + (rate − 1) × (real time − since). Its methods are safe for
// concurrent use.
type Clock struct {
	path string

	mu     sync.Mutex
	f      *os.File
	mem    []byte
	closed bool
}

// NewClock creates (or truncates) the file at path, maps it, and sets it to
// real time (offset 0, rate 1). Close it when no process reads it any more.
func NewClock(path string) (*Clock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("clockshim: %w", err)
	}
	size := os.Getpagesize()
	if err := f.Truncate(int64(size)); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("clockshim: %w", err)
	}
	mem, err := syscall.Mmap(int(f.Fd()), 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("clockshim: mmap %s: %w", path, err)
	}
	c := &Clock{path: path, f: f, mem: mem}
	if err := c.Set(0, 1, time.Now()); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Path returns the file's path.
func (c *Clock) Path() string { return c.path }

func (c *Clock) word(i int) *uint64 { return (*uint64)(unsafe.Pointer(&c.mem[8*i])) }

// Set makes the clock read real time + offset + (rate − 1) × (real time −
// since) from now on, in every process that reads the file. rate must be a
// positive finite number, else Set returns an error and changes nothing; it
// also returns an error after Close.
func (c *Clock) Set(offset time.Duration, rate float64, since time.Time) error {
	if !(rate > 0) || math.IsInf(rate, 0) {
		return fmt.Errorf("clockshim: rate %v is not a positive finite number", rate)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("clockshim: Set on a closed Clock")
	}
	seq := c.word(wordSeq)
	atomic.AddUint64(seq, 1) // odd: readers wait
	atomic.StoreUint64(c.word(wordOffset), uint64(offset.Nanoseconds()))
	atomic.StoreUint64(c.word(wordSince), uint64(since.UnixNano()))
	atomic.StoreUint64(c.word(wordRate), math.Float64bits(rate))
	atomic.StoreUint64(c.word(wordMagic), magic)
	atomic.AddUint64(seq, 1) // even: consistent again
	return nil
}

// Close unmaps and closes the file (it is not removed). Processes that
// mapped it keep the last state. Later calls do nothing.
func (c *Clock) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return errors.Join(syscall.Munmap(c.mem), c.f.Close())
}

// Env returns the environment entries that make a process started with
// them read clock through the shim lib: LD_PRELOAD=lib and EnvFile=path.
func Env(lib string, clock *Clock) []string {
	return []string{"LD_PRELOAD=" + lib, EnvFile + "=" + clock.Path()}
}

// Loaded reports whether the running process pid has lib mapped, from
// /proc/pid/maps. It returns an error if that file cannot be read.
func Loaded(pid int, lib string) (bool, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return false, fmt.Errorf("clockshim: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasSuffix(sc.Text(), " "+lib) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("clockshim: read maps of pid %d: %w", pid, err)
	}
	return false, nil
}

// Require is for tests: it returns the C compiler's path, or calls t.Skip
// with a clear message where none is found, except when the environment
// variable CI is "true", where it calls t.Fatal (CI must run these tests).
func Require(t testing.TB) string {
	t.Helper()
	cc, err := Compiler()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI=true, so the clock-shim tests must run", err)
		} else {
			t.Skipf("skipping clock-shim test: %v", err)
		}
		return ""
	}
	return cc
}
