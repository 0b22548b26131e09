package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		if pids := LivePids(); len(pids) > 0 {
			fmt.Fprintf(os.Stderr, "redisserver: redis-server pids left running: %v\n", pids)
			if code == 0 {
				code = 1
			}
		}
		os.Exit(code)
	}))
}

// client dials s with no retries at all, so a dead or paused node fails fast.
func client(t *testing.T, addr string, readTimeout time.Duration) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{
		Addr:                     addr,
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1,
		DialTimeout:              200 * time.Millisecond,
		DialerRetries:            1,
		ReadTimeout:              readTimeout,
		WriteTimeout:             readTimeout,
		ContextTimeoutEnabled:    true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func start(t *testing.T, opt Options) *Server {
	t.Helper()
	opt.Binary = Require(t)
	s, err := Start(t.Context(), opt)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

func infoPidOf(t *testing.T, rdb *redis.Client) int {
	t.Helper()
	info, err := rdb.Info(t.Context(), "server").Result()
	require.NoError(t, err)
	pid, err := infoPid(info)
	require.NoError(t, err)
	return pid
}

func TestStartSetGet(t *testing.T) {
	s := start(t, Options{})
	assert.Equal(t, "127.0.0.1:"+strconv.Itoa(s.Port()), s.Addr())
	assert.True(t, s.Running())

	rdb := client(t, s.Addr(), time.Second)
	ctx := t.Context()
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
	got, err := rdb.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)
}

// Options.Args reach the server's command line, after the package's own.
func TestArgsReachTheServer(t *testing.T) {
	s := start(t, Options{Args: []string{"--maxclients", "1234", "--save", "60 1"}})
	rdb := client(t, s.Addr(), time.Second)
	ctx := t.Context()
	got, err := rdb.ConfigGet(ctx, "maxclients").Result()
	require.NoError(t, err)
	assert.Equal(t, "1234", got["maxclients"])
	got, err = rdb.ConfigGet(ctx, "save").Result()
	require.NoError(t, err)
	assert.Equal(t, "60 1", got["save"], "a later option wins over the package's --save \"\"")
}

func TestPidMatchesInfo(t *testing.T) {
	s := start(t, Options{})
	rdb := client(t, s.Addr(), time.Second)
	assert.Equal(t, s.Pid(), infoPidOf(t, rdb))
	assert.Contains(t, LivePids(), s.Pid())
}

func TestKillRestartWithoutPersistenceLosesData(t *testing.T) {
	s := start(t, Options{})
	ctx := t.Context()
	port, oldPid := s.Port(), s.Pid()
	rdb := client(t, s.Addr(), time.Second)
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())

	require.NoError(t, s.Kill())
	require.NoError(t, s.Kill(), "Kill is idempotent")
	assert.False(t, s.Running())
	assert.NotContains(t, LivePids(), oldPid)
	_, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
	require.Error(t, err, "dial to a killed server must fail")
	require.Error(t, client(t, s.Addr(), time.Second).Ping(ctx).Err())

	require.NoError(t, s.Restart(ctx))
	assert.True(t, s.Running())
	assert.Equal(t, port, s.Port())
	assert.NotEqual(t, oldPid, s.Pid())
	rdb2 := client(t, s.Addr(), time.Second)
	assert.Equal(t, s.Pid(), infoPidOf(t, rdb2))
	assert.ErrorIs(t, rdb2.Get(ctx, "k").Err(), redis.Nil, "data must be gone")
}

func TestKillRestartWithPersistenceKeepsData(t *testing.T) {
	s := start(t, Options{Persistence: true})
	ctx := t.Context()
	rdb := client(t, s.Addr(), time.Second)
	require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())

	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart(ctx))
	rdb2 := client(t, s.Addr(), time.Second)
	got, err := rdb2.Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", got)

	// Restart while running kills first.
	old := s.Pid()
	require.NoError(t, s.Restart(ctx))
	assert.NotEqual(t, old, s.Pid())
	assert.Equal(t, "v", client(t, s.Addr(), time.Second).Get(ctx, "k").Val())
}

func TestStopContKeysExpireOnWallTime(t *testing.T) {
	s := start(t, Options{})
	ctx := t.Context()
	rdb := client(t, s.Addr(), 200*time.Millisecond)
	require.NoError(t, rdb.Set(ctx, "short", "v", 300*time.Millisecond).Err())
	require.NoError(t, rdb.Set(ctx, "long", "v", 10*time.Second).Err())
	setAt := time.Now()

	require.NoError(t, s.Stop())
	assert.True(t, s.Running(), "a paused server is still running")
	err := rdb.Get(ctx, "short").Err()
	require.Error(t, err)
	var nerr net.Error
	require.True(t, errors.As(err, &nerr) && nerr.Timeout(), "want a timeout, got %v", err)

	time.Sleep(time.Until(setAt.Add(500 * time.Millisecond)))
	require.NoError(t, s.Cont())

	require.NoError(t, rdb.Ping(ctx).Err())
	assert.ErrorIs(t, rdb.Get(ctx, "short").Err(), redis.Nil, "the PX key must have expired while paused")
	pttl, err := rdb.PTTL(ctx, "long").Result()
	require.NoError(t, err)
	assert.LessOrEqual(t, pttl, 10*time.Second-500*time.Millisecond, "TTL runs on wall time during the pause")
}

func TestStartN(t *testing.T) {
	bin := Require(t)
	servers, err := StartN(t.Context(), 5, Options{Binary: bin})
	require.NoError(t, err)
	t.Cleanup(func() {
		for _, s := range servers {
			assert.NoError(t, s.Close())
		}
	})
	require.Len(t, servers, 5)
	ports, pids := map[int]bool{}, map[int]bool{}
	for _, s := range servers {
		ports[s.Port()] = true
		pids[s.Pid()] = true
		rdb := client(t, s.Addr(), time.Second)
		assert.Equal(t, s.Pid(), infoPidOf(t, rdb))
	}
	assert.Len(t, ports, 5, "distinct ports")
	assert.Len(t, pids, 5, "distinct pids")
}

func TestCloseReapsEverything(t *testing.T) {
	bin := Require(t)
	s, err := Start(t.Context(), Options{Binary: bin})
	require.NoError(t, err)
	pid := s.Pid()
	require.NoError(t, s.Stop(), "Close must also handle a paused server")

	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")
	assert.False(t, s.Running())
	assert.Empty(t, LivePids())
	assert.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	assert.Error(t, s.Restart(t.Context()), "no Restart after Close")
}

func TestCloseRemovesTempDirKeepsGivenDir(t *testing.T) {
	bin := Require(t)
	given := t.TempDir()
	s, err := Start(t.Context(), Options{Binary: bin, Dir: given, Persistence: true})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	assert.DirExists(t, given)

	s2, err := Start(t.Context(), Options{Binary: bin})
	require.NoError(t, err)
	dir := s2.opt.Dir
	assert.DirExists(t, dir)
	require.NoError(t, s2.Close())
	assert.NoDirExists(t, dir)
}

// A port held by a program we did not start is never taken over, and that
// program is left alone.
func TestForeignPortIsLeftAlone(t *testing.T) {
	bin := Require(t)
	ctx := t.Context()

	t.Run("plain listener", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer l.Close()
		port := l.Addr().(*net.TCPAddr).Port
		_, err = Start(ctx, Options{Binary: bin, Port: port, StartTimeout: 2 * time.Second})
		require.Error(t, err)
		assert.ErrorIs(t, err, errPortConflict)
		t.Logf("Start on a foreign port: %v", err)
		assert.Empty(t, LivePids())
		c, err := net.Dial("tcp", l.Addr().String())
		require.NoError(t, err, "the foreign listener must still be there")
		_ = c.Close()
	})

	t.Run("foreign redis", func(t *testing.T) {
		port, err := pickPort()
		require.NoError(t, err)
		releasePort(port)
		// A redis-server this package did not start (not in its registry).
		foreign := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", t.TempDir())
		foreign.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, foreign.Start())
		defer func() {
			_ = foreign.Process.Kill()
			_ = foreign.Wait()
		}()
		faddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		require.Eventually(t, func() bool {
			c, err := net.Dial("tcp", faddr)
			if err == nil {
				_ = c.Close()
			}
			return err == nil
		}, 3*time.Second, 10*time.Millisecond)
		frdb := client(t, faddr, time.Second)
		require.NoError(t, frdb.Ping(ctx).Err())

		_, err = Start(ctx, Options{Binary: bin, Port: port, StartTimeout: 2 * time.Second})
		require.Error(t, err)
		assert.ErrorIs(t, err, errPortConflict)
		t.Logf("Start on a foreign port: %v", err)
		assert.Empty(t, LivePids())
		assert.Equal(t, foreign.Process.Pid, infoPidOf(t, frdb), "the foreign server must be untouched")
	})
}

func TestStartErrors(t *testing.T) {
	_, err := Start(t.Context(), Options{Binary: "/nonexistent/redis-server"})
	require.Error(t, err)

	t.Setenv("PATH", "")
	_, err = Available()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redis-server not found on PATH: install it with `apt-get install redis-server`")
	_, err = Start(t.Context(), Options{})
	require.Error(t, err)
}

func TestTailBuffer(t *testing.T) {
	b := &tailBuffer{max: 4}
	_, _ = b.Write([]byte("ab"))
	_, _ = b.Write([]byte("cdef"))
	assert.Equal(t, "cdef", b.String())
	_, _ = b.Write([]byte("g"))
	assert.Equal(t, "defg", b.String())
}

func TestContextCancelStopsStart(t *testing.T) {
	bin := Require(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := Start(ctx, Options{Binary: bin})
	require.Error(t, err)
	assert.Empty(t, LivePids())
}

// fakeTB records Skipf/Fatalf instead of stopping the goroutine.
type fakeTB struct {
	testing.TB
	skipped, fatal string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Skipf(format string, a ...any)  { f.skipped = fmt.Sprintf(format, a...) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }

func TestRequireWithoutRedis(t *testing.T) {
	t.Setenv("PATH", "")

	t.Setenv("CI", "")
	f := &fakeTB{}
	assert.Empty(t, Require(f))
	assert.Contains(t, f.skipped, "apt-get install redis-server")
	assert.Empty(t, f.fatal)

	t.Setenv("CI", "true")
	f = &fakeTB{}
	assert.Empty(t, Require(f))
	assert.Contains(t, f.fatal, "apt-get install redis-server")
	assert.Empty(t, f.skipped)
}
