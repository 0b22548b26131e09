// Package bench compares this module's Redlock client with other Go lock
// libraries (go-redsync/redsync, bsm/redislock) and with plain go-redis, on
// real redis-server processes it starts itself. It is a separate module so
// that users of the library never download the libraries it is compared to.
// The benchmarks are in bench_test.go; run.sh runs them and prints a table.
//
// This file starts and stops the redis-server processes. It is a small
// version of the root module's internal/redisserver (which a nested module
// cannot import): free loopback ports, persistence off, the pid verified
// through INFO server, and only ever the process it started is signalled.
package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Server is one redis-server process started by StartServer.
type Server struct {
	Addr string // "127.0.0.1:PORT"
	Pid  int
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed once the process has been reaped
}

// StartServer starts redis-server on a free loopback port with persistence
// off (--save "" --appendonly no) and returns once the process answering
// INFO server on that port is the one it started. A port taken by another
// program in the meantime is detected by that pid check and another port is
// tried; the other program is never touched.
func StartServer(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found on PATH (apt-get install redis-server): %w", err)
	}
	var errs []error
	for range 5 {
		s, err := startOnce(ctx, bin)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func startOnce(ctx context.Context, bin string) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redlock-bench-*")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--daemonize", "no", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", "", "--loglevel", "warning")
	cmd.Dir = dir
	// Own process group (a Ctrl-C reaches only the test binary), and
	// SIGKILL when the test binary dies, so no server outlives a run.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Pid: cmd.Process.Pid, cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	if err := s.verify(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// verify waits for PING and checks that INFO server's process_id is ours.
func (s *Server) verify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var lastErr error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("redis-server pid %d on %s exited during start-up", s.Pid, s.Addr)
		default:
		}
		pid, err := answeringPid(ctx, s.Addr)
		if err == nil {
			if pid != s.Pid {
				return fmt.Errorf("%s answered by pid %d, not our pid %d", s.Addr, pid, s.Pid)
			}
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("redis-server pid %d on %s: no answer: %w", s.Pid, s.Addr, lastErr)
		case <-s.done:
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// answeringPid returns the process_id of the server answering on addr.
func answeringPid(ctx context.Context, addr string) (int, error) {
	// A plain TCP connect first: go-redis would log every refused dial.
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return 0, err
	}
	conn.Close()
	rdb := AdminClient(addr)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0, err
	}
	return infoPid(info)
}

func infoPid(info string) (int, error) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("INFO server: no process_id")
}

// Alive reports whether the process has not been reaped yet.
func (s *Server) Alive() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL to the process we started (through its os.Process
// handle, so a reaped and reused pid is never signalled) and waits until it
// has been reaped. The data directory stays until Stop.
func (s *Server) Kill() {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Stop kills the server (if still running) and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	os.RemoveAll(s.dir)
}

// AdminClient is the harness's own client (key checks, flushes): RESP2, no
// retries, context deadlines honoured. The benchmarked libraries never use
// it.
func AdminClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1,
		DialerRetries:            1,
		DialTimeout:              time.Second,
		ReadTimeout:              2 * time.Second,
		ContextTimeoutEnabled:    true,
		PoolSize:                 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}
