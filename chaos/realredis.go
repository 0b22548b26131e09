package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/clockshim"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// realBackend is a redis-server process started by the harness, with its
// own data directory (so RestartAmnesia can wipe it).
//
// Its clock is real when shim is set: the process runs with the clock shim
// preloaded (internal/clockshim), and syncClock writes the node clock into
// the shim's file, so the server's own clock moves: TIME, and key expiry,
// which Redis 7.0 computes from gettimeofday (mstime). Without a C compiler
// the clock is emulated on the keys instead: the node clock's offset from
// real time is the amount of time by which every TTL should have been
// shortened; applied is how much has been, and syncClock applies the
// difference (in whole milliseconds) with shortenScript. TIME then never
// moves, and backward steps and slow clocks cannot be emulated.
type realBackend struct {
	srv         *redisserver.Server
	dir         string
	persistence bool
	clock       *nodeClock
	admin       *redis.Client
	applied     time.Duration // clock offset already applied to the keys (emulation)

	shim    *clockshim.Clock // nil: the clock is emulated on the keys
	shimLib string           // the shim's shared object, preloaded into srv
}

// shortenScript shortens the TTL of every key that has one by ARGV[1]
// milliseconds, deleting the keys whose TTL is at most that: the effect of
// the clock jumping forward by ARGV[1] ms. One script, so the node applies
// it atomically (SCAN inside scripts is allowed on Redis 7 with effect
// replication). It returns the number of keys it touched.
var shortenScript = redis.NewScript(`
local d = tonumber(ARGV[1])
local n = 0
local cursor = '0'
repeat
  local r = redis.call('SCAN', cursor, 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local p = redis.call('PTTL', k)
    if p >= 0 then
      if p <= d then
        redis.call('DEL', k)
      else
        redis.call('PEXPIRE', k, p - d)
      end
      n = n + 1
    end
  end
until cursor == '0'
return n
`)

func (b *realBackend) addr() string { return b.srv.Addr() }

func (b *realBackend) kill() error { return b.srv.Kill() }

func (b *realBackend) start(ctx context.Context) error {
	if err := b.srv.Restart(ctx); err != nil {
		return err
	}
	return b.checkShim()
}

// checkShim checks that the running server has the clock shim mapped, when
// it should: a server that silently ignored LD_PRELOAD would run on the
// machine's clock while the harness reports clock faults. It kills the
// server when the shim is missing.
func (b *realBackend) checkShim() error {
	if b.shim == nil {
		return nil
	}
	pid := b.srv.Pid()
	ok, err := clockshim.Loaded(pid, b.shimLib)
	if err == nil && !ok {
		err = fmt.Errorf("chaos: redis-server pid %d runs without the clock shim %s", pid, b.shimLib)
	}
	if err != nil {
		return errors.Join(err, b.srv.Kill())
	}
	return nil
}

func (b *realBackend) keepsData() bool { return b.persistence }

// wipe removes everything in the (killed) server's data directory.
func (b *realBackend) wipe() error {
	entries, err := os.ReadDir(b.dir)
	if err != nil {
		return fmt.Errorf("chaos: wipe %s: %w", b.dir, err)
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(b.dir, e.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("chaos: wipe %s: %w", b.dir, err)
	}
	return nil
}

func (b *realBackend) pause() error  { return b.srv.Stop() }
func (b *realBackend) resume() error { return b.srv.Cont() }

func (b *realBackend) syncClock(ctx context.Context) error {
	if b.shim != nil {
		offset, rate, since := b.clock.state()
		return b.shim.Set(offset, rate, since)
	}
	owed := b.clock.offsetAt(time.Now()) - b.applied
	ms := owed.Milliseconds()
	if ms <= 0 {
		return nil
	}
	if err := shortenScript.Run(ctx, b.admin, nil, ms).Err(); err != nil {
		return err
	}
	b.applied += time.Duration(ms) * time.Millisecond
	return nil
}

func (b *realBackend) forgetClock() { b.applied = b.clock.offsetAt(time.Now()) }

func (b *realBackend) emulatesClock() bool { return b.shim == nil }

func (b *realBackend) stepsBack() bool { return b.shim != nil }

func (b *realBackend) close() error {
	err := b.srv.Close()
	if b.shim != nil {
		err = errors.Join(err, b.shim.Close())
	}
	return err
}

// realClocks is how a redis-server cluster's clocks are moved: with the
// shim at lib (real clocks) or, when lib is "", emulated on the keys; desc
// says which, and why, for the run's output.
type realClocks struct {
	lib  string
	desc string
}

// prepareClocks decides, for mode, how the clocks of a redis-server cluster
// whose files live in dir are moved, building the shim into dir when they
// are to be real. ClockAuto falls back to emulation when no C compiler is
// found (or the build fails); ClockReal makes that an error.
func prepareClocks(ctx context.Context, mode ClockMode, dir string) (realClocks, error) {
	if mode == ClockEmulated {
		return realClocks{desc: "emulated on the keys (asked for): TTLs are shortened, TIME does not move; backward steps and slow clocks are skipped"}, nil
	}
	lib, err := clockshim.Build(ctx, dir)
	if err != nil {
		if mode == ClockReal {
			return realClocks{}, fmt.Errorf("chaos: real clocks: %w", err)
		}
		return realClocks{desc: fmt.Sprintf("emulated on the keys (TTLs are shortened, TIME does not move; backward steps and slow clocks are skipped), because the clock shim could not be built: %v", err)}, nil
	}
	return realClocks{lib: lib, desc: "real: each redis-server's own wall clock moves (TIME and key expiry), through a preloaded clock shim"}, nil
}

// newRealBackend starts node i's redis-server with data directory dataDir,
// with the shim of rc preloaded if it has one (reading a clock file beside
// dataDir), and checks that the shim is loaded.
func newRealBackend(ctx context.Context, opt redisserver.Options, rc realClocks, dataDir string, clock *nodeClock, persistence bool) (*realBackend, error) {
	b := &realBackend{dir: dataDir, persistence: persistence, clock: clock}
	if rc.lib != "" {
		shim, err := clockshim.NewClock(dataDir + ".clock")
		if err != nil {
			return nil, err
		}
		offset, rate, since := clock.state()
		if err := shim.Set(offset, rate, since); err != nil {
			return nil, errors.Join(err, shim.Close())
		}
		b.shim, b.shimLib = shim, rc.lib
		opt.Env = append(opt.Env, clockshim.Env(rc.lib, shim)...)
	}
	srv, err := redisserver.Start(ctx, opt)
	if err != nil {
		if b.shim != nil {
			err = errors.Join(err, b.shim.Close())
		}
		return nil, err
	}
	b.srv = srv
	if err := b.checkShim(); err != nil {
		return nil, errors.Join(err, b.close())
	}
	return b, nil
}
