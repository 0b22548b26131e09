// Package redisserver starts and controls real redis-server processes for
// tests, the chaos harness and benchmarks.
//
// Rules it follows (and that callers can rely on):
//   - It only ever signals processes it started itself, through the
//     *os.Process handle returned by os/exec (a pidfd on Linux), so a pid that
//     has been reaped and reused by another program is never signalled.
//   - Servers listen on 127.0.0.1 only, on a port chosen by the caller or
//     picked free by this package, and a server only counts as started once
//     the pid answering INFO server (field process_id) is the pid we started.
//     Another program already listening on a port is never touched: the start
//     attempt fails (or, for a picked port, moves to another port).
//   - Every started process is reaped by a goroutine running cmd.Wait, and is
//     listed by LivePids until it has been reaped.
//
// The package is Linux-only: started servers get SIGKILL when the test
// process dies (Pdeathsig), so a crashed or timed-out test binary does not
// leave orphan servers behind.
package redisserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"golang.org/x/sync/errgroup"
)

const (
	defaultStartTimeout = 5 * time.Second
	// termGrace is how long Close waits after SIGTERM before SIGKILL.
	termGrace = 2 * time.Second
	// reapTimeout bounds the wait for a SIGKILLed process to be reaped.
	reapTimeout = 10 * time.Second
	// pickAttempts is how many ports Start tries when it picks the port.
	pickAttempts = 5
	// outputTail is how many bytes of the server's stdout/stderr are kept.
	outputTail = 8 << 10
	// probeInterval is the pause between two readiness probes.
	probeInterval = 10 * time.Millisecond
)

// errPortConflict marks a start failure caused by the port being taken by
// someone else (bind failed, or another process answered on it). Start
// retries on another port when it picked the port itself.
var errPortConflict = errors.New("port in use by another process")

// Options configures Start. The zero value gives sensible defaults.
type Options struct {
	// Binary is the path to redis-server; "" looks up "redis-server" on PATH.
	Binary string
	// Dir is the server's working directory (dump and AOF files). "" creates
	// a fresh directory with os.MkdirTemp that Close removes. A directory
	// given here is never removed; do not share one between two servers with
	// Persistence on.
	Dir string
	// Persistence false (default) runs with --save "" --appendonly no: a
	// Kill + Restart loses every key. True runs with --appendonly yes
	// --appendfsync always (and still --save ""): every acknowledged write
	// survives Kill + Restart.
	Persistence bool
	// Port is the TCP port on 127.0.0.1. 0 picks a free loopback port (listen
	// on 127.0.0.1:0, close, use it), trying another port a few times if the
	// server cannot bind it or another process answers on it. A non-zero
	// port is tried once.
	Port int
	// EnableDebug passes --enable-debug-command local (for DEBUG SLEEP etc.).
	EnableDebug bool
	// StartTimeout bounds how long Start and Restart wait for the server to
	// answer PING; 0 means 5 s.
	StartTimeout time.Duration
	// Args are more redis-server arguments, put after the package's own
	// (a later option wins), e.g. "--cluster-enabled", "yes".
	Args []string
	// Env is added to this process's environment for the server (entries
	// "KEY=value"; a key given here replaces the inherited one), e.g. an
	// LD_PRELOAD. Restart uses it again.
	Env []string
}

// proc is one started redis-server process.
type proc struct {
	cmd  *exec.Cmd
	pid  int
	out  *tailBuffer
	done chan struct{} // closed once cmd.Wait has returned (process reaped)
}

// exited reports whether the process has been reaped.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig to the process unless it has already been reaped. It
// goes through os.Process, which never signals a reused pid.
func (p *proc) signal(sig os.Signal) error {
	if p.exited() {
		return nil
	}
	err := p.cmd.Process.Signal(sig)
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// waitExit waits up to d for the process to be reaped.
func (p *proc) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

// kill sends SIGKILL and waits for the process to be reaped.
func (p *proc) kill() error {
	if err := p.signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("redisserver: SIGKILL pid %d: %w", p.pid, err)
	}
	if !p.waitExit(reapTimeout) {
		return fmt.Errorf("redisserver: pid %d not reaped %v after SIGKILL", p.pid, reapTimeout)
	}
	return nil
}

// Server is one redis-server process started by this package, listening on
// 127.0.0.1. Its methods are safe for concurrent use; they wait while a
// Restart or Close of the same Server is in progress.
type Server struct {
	mu      sync.Mutex
	opt     Options // resolved: Binary, Dir and StartTimeout are set
	port    int
	tempDir bool  // Dir was created by Start and is removed by Close
	proc    *proc // last started process; nil if the last start failed
	lastPid int
	paused  bool
	closed  bool
}

// Package-level registries: pids started and not yet reaped, and ports held
// by Servers that are not closed (so Restart finds its port free of our own
// other servers, and concurrent picks never hand out the same port twice).
var (
	regMu    sync.Mutex
	livePids = map[int]struct{}{}
	ports    = map[int]struct{}{}
)

// LivePids returns, sorted, the pids of the redis-server processes started by
// this package that have not been reaped yet. After every Server is closed it
// returns an empty slice.
func LivePids() []int {
	regMu.Lock()
	defer regMu.Unlock()
	out := make([]int, 0, len(livePids))
	for pid := range livePids {
		out = append(out, pid)
	}
	slices.Sort(out)
	return out
}

// reservePort records port as held by one of our Servers; false if it is
// already held.
func reservePort(port int) bool {
	regMu.Lock()
	defer regMu.Unlock()
	if _, ok := ports[port]; ok {
		return false
	}
	ports[port] = struct{}{}
	return true
}

func releasePort(port int) {
	regMu.Lock()
	defer regMu.Unlock()
	delete(ports, port)
}

// pickPort finds a loopback port that is free right now and not held by one
// of our Servers, and reserves it.
func pickPort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redisserver: pick a free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err := l.Close(); err != nil {
			return 0, fmt.Errorf("redisserver: pick a free port: %w", err)
		}
		if reservePort(port) {
			return port, nil
		}
	}
	return 0, errors.New("redisserver: pick a free port: every port offered is already held by our servers")
}

// Available looks up redis-server on PATH and returns its path. When it is
// missing the error reads "redis-server not found on PATH: install it with
// `apt-get install redis-server`" followed by the lookup error.
func Available() (path string, err error) {
	path, err = exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redis-server not found on PATH: install it with `apt-get install redis-server` (%w)", err)
	}
	return path, nil
}

// Require is for tests: it returns the path of redis-server, or calls t.Skip
// with a clear message when redis-server is missing, except when the
// environment variable CI is "true", where it calls t.Fatal instead (CI must
// run the real-Redis tests).
func Require(t testing.TB) string {
	t.Helper()
	path, err := Available()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI=true, so the real-Redis tests must run", err)
		} else {
			t.Skipf("skipping real-Redis test: %v", err)
		}
		return ""
	}
	return path
}

// Start starts a redis-server with --port P --bind 127.0.0.1 --protected-mode
// no --daemonize no --dir D --logfile "" (output captured in memory) plus the
// persistence and debug flags of opt, waits until it answers PING, then
// checks that INFO server's process_id is the pid it started. On failure
// (process exit, bind error, pid mismatch, opt.StartTimeout or ctx expiry) it
// kills what it started, removes the temp dir and returns an error that
// includes the tail of the server's output. ctx only bounds the start; the
// server runs until Kill or Close.
func Start(ctx context.Context, opt Options) (*Server, error) {
	if opt.Binary == "" {
		path, err := Available()
		if err != nil {
			return nil, err
		}
		opt.Binary = path
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = defaultStartTimeout
	}
	if opt.Port < 0 || opt.Port > 65535 {
		return nil, fmt.Errorf("redisserver: invalid port %d", opt.Port)
	}
	s := &Server{opt: opt}
	if opt.Dir == "" {
		dir, err := os.MkdirTemp("", "redisserver-*")
		if err != nil {
			return nil, fmt.Errorf("redisserver: create temp dir: %w", err)
		}
		s.opt.Dir = dir
		s.tempDir = true
	}
	cleanup := func() {
		if s.tempDir {
			_ = os.RemoveAll(s.opt.Dir)
		}
	}

	if opt.Port != 0 {
		if !reservePort(opt.Port) {
			cleanup()
			return nil, fmt.Errorf("redisserver: port %d is already used by another server of this package", opt.Port)
		}
		p, err := s.launch(ctx, opt.Port)
		if err != nil {
			releasePort(opt.Port)
			cleanup()
			return nil, err
		}
		s.port, s.proc, s.lastPid = opt.Port, p, p.pid
		return s, nil
	}

	var errs []error
	for range pickAttempts {
		port, err := pickPort()
		if err != nil {
			errs = append(errs, err)
			break
		}
		p, err := s.launch(ctx, port)
		if err == nil {
			s.port, s.proc, s.lastPid = port, p, p.pid
			return s, nil
		}
		releasePort(port)
		errs = append(errs, err)
		if !errors.Is(err, errPortConflict) || ctx.Err() != nil {
			break
		}
	}
	cleanup()
	return nil, errors.Join(errs...)
}

// args builds the redis-server command line for port.
func (s *Server) args(port int) []string {
	a := []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--daemonize", "no",
		"--dir", s.opt.Dir,
		"--logfile", "",
		"--save", "",
	}
	if s.opt.Persistence {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.opt.EnableDebug {
		a = append(a, "--enable-debug-command", "local")
	}
	return append(a, s.opt.Args...)
}

// launch starts one process on port and waits until it is verified. On
// failure the process is killed and reaped before launch returns.
func (s *Server) launch(ctx context.Context, port int) (*proc, error) {
	cmd := exec.Command(s.opt.Binary, s.args(port)...)
	cmd.Dir = s.opt.Dir
	if len(s.opt.Env) > 0 {
		cmd.Env = append(os.Environ(), s.opt.Env...)
	}
	out := &tailBuffer{max: outputTail}
	cmd.Stdout = out
	cmd.Stderr = out
	// Own process group: a terminal's Ctrl-C reaches only the test binary;
	// Pdeathsig then kills the server when the test binary dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// A forked child (RDB/AOF rewrite) may hold the output pipe open; do not
	// let that block the reaping of the server itself.
	cmd.WaitDelay = time.Second

	// Register before the pid exists is impossible; hold regMu across Start
	// so LivePids never misses a started pid.
	regMu.Lock()
	if err := cmd.Start(); err != nil {
		regMu.Unlock()
		return nil, fmt.Errorf("redisserver: start %s: %w", s.opt.Binary, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, out: out, done: make(chan struct{})}
	livePids[p.pid] = struct{}{}
	regMu.Unlock()

	go func() {
		_ = cmd.Wait()
		regMu.Lock()
		delete(livePids, p.pid)
		regMu.Unlock()
		close(p.done)
	}()

	if err := s.verify(ctx, p, port); err != nil {
		if kerr := p.kill(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		return nil, err
	}
	return p, nil
}

// verify waits until the server on port answers PING and checks that the pid
// answering INFO server is p's.
func (s *Server) verify(ctx context.Context, p *proc, port int) error {
	ctx, cancel := context.WithTimeout(ctx, s.opt.StartTimeout)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))

	fail := func(format string, args ...any) error {
		msg := fmt.Sprintf(format, args...)
		return fmt.Errorf("redisserver: redis-server pid %d on %s: %s; output tail:\n%s",
			p.pid, addr, msg, p.out.String())
	}
	exitedErr := func() error {
		txt := p.out.String()
		if strings.Contains(txt, "Address already in use") || strings.Contains(txt, "Failed listening on port") {
			return fmt.Errorf("%w: %w", errPortConflict, fail("exited: could not bind the port"))
		}
		return fail("exited before answering PING (%v)", p.cmd.ProcessState)
	}

	// Each attempt uses a fresh client: after a failed dial a go-redis pool
	// keeps returning that error for about a second.
	var rdb *redis.Client
	defer func() {
		if rdb != nil {
			_ = rdb.Close()
		}
	}()
	var lastErr error
	for {
		if p.exited() {
			return exitedErr()
		}
		// A plain TCP connect first, so that go-redis does not log every
		// refused dial while the server is starting.
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			_ = c.Close()
			rdb = probeClient(addr)
			err = rdb.Ping(ctx).Err()
			if err == nil {
				break
			}
			_ = rdb.Close()
			rdb = nil
		}
		lastErr = err
		t := time.NewTimer(probeInterval)
		select {
		case <-p.done:
			t.Stop()
			return exitedErr()
		case <-ctx.Done():
			t.Stop()
			return fail("no PING answer within %v: %v (last error: %v)", s.opt.StartTimeout, ctx.Err(), lastErr)
		case <-t.C:
		}
	}

	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return fail("INFO server: %v", err)
	}
	pid, err := infoPid(info)
	if err != nil {
		return fail("%v", err)
	}
	if pid != p.pid {
		return fmt.Errorf("%w: %w", errPortConflict,
			fail("the server answering is pid %d, not ours; another process owns the port", pid))
	}
	if p.exited() {
		return exitedErr()
	}
	return nil
}

// probeClient returns a go-redis client for the readiness probes: no command
// retries, one dial attempt, short timeouts, context deadlines honoured.
func probeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1,
		DialTimeout:              200 * time.Millisecond,
		DialerRetries:            1,
		ReadTimeout:              500 * time.Millisecond,
		WriteTimeout:             500 * time.Millisecond,
		ContextTimeoutEnabled:    true,
		PoolSize:                 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// infoPid extracts process_id from an INFO server reply.
func infoPid(info string) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "process_id:")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("INFO server: bad process_id %q", v)
		}
		return pid, nil
	}
	return 0, errors.New("INFO server: no process_id field")
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port()))
}

// Port returns the server's TCP port on 127.0.0.1. It does not change across
// Kill and Restart.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.port
}

// Pid returns the pid of the process most recently started for this Server
// (it changes after Restart). The pid is only ours while Running reports
// true: once the process has been reaped the OS may reuse it, so never
// signal it yourself; use Kill, Stop, Cont and Close.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastPid
}

// Running reports whether the server process is alive (started and not yet
// reaped). A paused (Stop) server is running.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Kill sends SIGKILL to the server process and waits until it has been
// reaped (at most 10 s, else an error). It is idempotent: killing a server
// that is not running returns nil. The port stays held by this Server (no
// other server of this package gets it) for Restart; another program may
// still take it meanwhile, which makes Restart fail.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	if s.proc == nil {
		return nil
	}
	if err := s.proc.kill(); err != nil {
		return err
	}
	s.proc = nil
	s.paused = false
	return nil
}

// Restart kills the server if it is running (as Kill), then starts it again
// on the same port with the same options and verifies the pid again. Without
// Persistence all data is gone; with Persistence the AOF is reloaded. It
// waits at most Options.StartTimeout (and ctx) and returns an error if the
// Server is closed, the port has been taken by another process, or the new
// process does not come up.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("redisserver: Restart on a closed server")
	}
	if err := s.killLocked(); err != nil {
		return err
	}
	p, err := s.launch(ctx, s.port)
	if err != nil {
		return err
	}
	s.proc, s.lastPid = p, p.pid
	return nil
}

// Stop pauses the server with SIGSTOP: the process stays, its connections
// stay open, and it stops answering until Cont. It returns an error if the
// server is not running or the signal fails.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return errors.New("redisserver: Stop: server is not running")
	}
	if err := s.proc.signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redisserver: SIGSTOP pid %d: %w", s.proc.pid, err)
	}
	s.paused = true
	return nil
}

// Cont resumes a server paused by Stop with SIGCONT; commands sent meanwhile
// run then. It returns an error if the server is not running or the signal
// fails.
func (s *Server) Cont() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return errors.New("redisserver: Cont: server is not running")
	}
	if err := s.proc.signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redisserver: SIGCONT pid %d: %w", s.proc.pid, err)
	}
	s.paused = false
	return nil
}

// Close stops the server for good: if it is running (SIGCONT first if
// paused) it sends SIGTERM, then SIGKILL after 2 s, and waits until the
// process has been reaped; then it releases the port and removes the temp
// dir created by Start. It is idempotent and never signals a pid it did not
// start. Errors come from signalling, reaping (10 s bound) or removing the
// directory.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	var errs []error
	if p := s.proc; p != nil && !p.exited() {
		if s.paused {
			if err := p.signal(syscall.SIGCONT); err != nil {
				errs = append(errs, fmt.Errorf("redisserver: SIGCONT pid %d: %w", p.pid, err))
			}
		}
		if err := p.signal(syscall.SIGTERM); err != nil {
			errs = append(errs, fmt.Errorf("redisserver: SIGTERM pid %d: %w", p.pid, err))
		}
		if !p.waitExit(termGrace) {
			if err := p.kill(); err != nil {
				// Still ours and alive: keep the Server open so Close can be
				// retried.
				return errors.Join(append(errs, err)...)
			}
		}
	}
	s.proc = nil
	s.paused = false
	s.closed = true
	releasePort(s.port)
	if s.tempDir {
		if err := os.RemoveAll(s.opt.Dir); err != nil {
			errs = append(errs, fmt.Errorf("redisserver: remove %s: %w", s.opt.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// StartN starts n servers concurrently with the same options (for a 5-node
// cluster, say). opt.Port must be 0 when n > 1, and opt.Dir must be "" when
// opt.Persistence is set and n > 1 (servers would share their AOF). On any
// error it closes the servers already started and returns the errors.
func StartN(ctx context.Context, n int, opt Options) ([]*Server, error) {
	if n < 0 {
		return nil, fmt.Errorf("redisserver: StartN: negative n %d", n)
	}
	if n > 1 && opt.Port != 0 {
		return nil, errors.New("redisserver: StartN: Options.Port must be 0 for more than one server")
	}
	if n > 1 && opt.Persistence && opt.Dir != "" {
		return nil, errors.New("redisserver: StartN: servers with Persistence cannot share Options.Dir")
	}
	servers := make([]*Server, n)
	g, gctx := errgroup.WithContext(ctx)
	for i := range servers {
		g.Go(func() error {
			s, err := Start(gctx, opt)
			if err != nil {
				return fmt.Errorf("server %d of %d: %w", i+1, n, err)
			}
			servers[i] = s
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		errs := []error{err}
		for _, s := range servers {
			if s != nil {
				if cerr := s.Close(); cerr != nil {
					errs = append(errs, cerr)
				}
			}
		}
		return nil, errors.Join(errs...)
	}
	return servers, nil
}

// tailBuffer is an io.Writer that keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		n := copy(b.buf, b.buf[over:])
		b.buf = b.buf[:n]
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
