package pgfence

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// startTimeout bounds initdb plus the server's start.
	startTimeout = 60 * time.Second
	// stopGrace is how long Close waits after SIGINT (a fast shutdown)
	// before SIGKILL.
	stopGrace = 10 * time.Second
	// outputTail is how many bytes of initdb's and the server's output are
	// kept for error messages.
	outputTail = 8 << 10
)

// Binaries returns the directory holding PostgreSQL's initdb and postgres:
// the one of `postgres` on PATH, else the newest /usr/lib/postgresql/*/bin
// (where Debian's package puts them, off PATH). The error says how to
// install them.
func Binaries() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "initdb")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	var best string
	bestV := -1
	for _, d := range dirs {
		v, err := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		if err != nil || v <= bestV {
			continue
		}
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			best, bestV = d, v
		}
	}
	if best == "" {
		return "", errors.New("pgfence: PostgreSQL not found (no postgres with initdb on PATH, nothing in /usr/lib/postgresql/*/bin): install it with `apt-get install postgresql`")
	}
	return best, nil
}

// Require is for tests: it returns Binaries, or calls t.Skip with a clear
// message where PostgreSQL is missing, except when the environment variable
// CI is "true", where it calls t.Fatal (CI must run these tests).
func Require(t testing.TB) string {
	t.Helper()
	dir, err := Binaries()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; CI=true, so the PostgreSQL tests must run", err)
		} else {
			t.Skipf("skipping PostgreSQL test: %v", err)
		}
		return ""
	}
	return dir
}

// Server is a PostgreSQL server started by StartServer: its own data
// directory, a free port on 127.0.0.1, trust authentication for the
// database user postgres. Close stops it.
type Server struct {
	dir  string // removed by Close
	port int
	cmd  *exec.Cmd
	out  *tail
	done chan struct{} // closed once the postmaster has been reaped

	closeOnce sync.Once
	closeErr  error
}

// StartServer initialises a data directory in a new temporary directory
// (initdb) and starts the postgres binary of bin (from Binaries; "" finds
// it) on a free loopback port, listening on 127.0.0.1 only. When this
// process is root, both run as the user postgres (PostgreSQL refuses root),
// which must exist (Debian's package creates it). The server counts as
// started once it accepts a connection, reports our data directory, and
// its postmaster.pid names the pid we started. On failure everything is
// stopped and removed, and the error carries the output's tail. ctx bounds
// the start; the server runs until Close.
func StartServer(ctx context.Context, bin string) (*Server, error) {
	if bin == "" {
		var err error
		if bin, err = Binaries(); err != nil {
			return nil, err
		}
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "pgfence-*")
	if err != nil {
		return nil, fmt.Errorf("pgfence: %w", err)
	}
	s := &Server{dir: base, out: &tail{max: outputTail}, done: make(chan struct{})}
	fail := func(err error) (*Server, error) {
		return nil, errors.Join(err, s.Close())
	}
	if cred != nil {
		if err := os.Chown(base, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(fmt.Errorf("pgfence: %w", err))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	data := filepath.Join(base, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-sync")
	initdb.Dir = base
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("pgfence: initdb: %w\n%s", err, out))
	}
	port, err := freePort()
	if err != nil {
		return fail(err)
	}
	s.port = port
	s.cmd = exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories="+base,
		"-c", "max_connections=40", "-c", "shared_buffers=16MB")
	s.cmd.Dir = base
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	// Its own process group (a terminal's Ctrl-C reaches only us), and
	// SIGKILL when this process dies, so no server outlives a crashed test.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.cmd.WaitDelay = time.Second
	if err := s.cmd.Start(); err != nil {
		s.cmd = nil
		return fail(fmt.Errorf("pgfence: start postgres: %w", err))
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.done)
	}()
	if err := s.verify(ctx, data); err != nil {
		return fail(fmt.Errorf("pgfence: postgres pid %d on port %d: %w; output tail:\n%s", s.cmd.Process.Pid, port, err, s.out))
	}
	return s, nil
}

// credential returns the postgres user's credential when this process is
// root, else nil (run as ourselves).
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgfence: PostgreSQL refuses to run as root, and there is no user postgres to run it as (Debian's package creates it): %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgfence: user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgfence: pick a port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// verify waits until the server accepts a connection, then checks that it
// is ours: its data directory is data, and postmaster.pid names our pid.
func (s *Server) verify(ctx context.Context, data string) error {
	var conn *pgx.Conn
	for {
		select {
		case <-s.done:
			return fmt.Errorf("exited before accepting connections (%v)", s.cmd.ProcessState)
		default:
		}
		var err error
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err = pgx.Connect(cctx, s.ConnString())
		cancel()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no connection within %v: %w (last error: %v)", startTimeout, ctx.Err(), err)
		case <-s.done:
			return fmt.Errorf("exited before accepting connections (%v)", s.cmd.ProcessState)
		case <-time.After(50 * time.Millisecond):
		}
	}
	defer conn.Close(context.Background())
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return fmt.Errorf("SHOW data_directory: %w", err)
	}
	if dir != data {
		return fmt.Errorf("the server on the port has data directory %s, not ours (%s): another server owns the port", dir, data)
	}
	pidFile, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return err
	}
	first, _, _ := strings.Cut(string(pidFile), "\n")
	if pid, err := strconv.Atoi(strings.TrimSpace(first)); err != nil || pid != s.cmd.Process.Pid {
		return fmt.Errorf("postmaster.pid names pid %q, not the pid we started", first)
	}
	return nil
}

// ConnString returns the URL to connect to the server's database postgres
// as the user postgres.
func (s *Server) ConnString() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
}

// Pid returns the pid of the server's postmaster (the process we started).
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Running reports whether the postmaster has not been reaped yet.
func (s *Server) Running() bool {
	select {
	case <-s.done:
		return false
	default:
		return s.cmd != nil
	}
}

// Close stops the server, by the process we started (never a pid read
// from anywhere): SIGINT, PostgreSQL's fast shutdown, then SIGKILL after
// 10 s; it waits until the postmaster has been reaped and removes the data
// directory. Later calls return the first one's result.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		if s.cmd != nil && s.Running() {
			if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
				errs = append(errs, err)
			}
			select {
			case <-s.done:
			case <-time.After(stopGrace):
				if err := s.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
					errs = append(errs, err)
				}
				<-s.done
			}
		}
		errs = append(errs, os.RemoveAll(s.dir))
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// tail is an io.Writer that keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
