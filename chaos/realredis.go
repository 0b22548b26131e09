package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// realBackend is a redis-server process started by the harness, with its
// own data directory (so RestartAmnesia can wipe it).
//
// Its clock is the machine's: redis-server cannot run under libfaketime
// here, so JumpClock and SetClockRate are emulated on the keys. The node
// clock's offset from real time is the amount of time by which every TTL
// should have been shortened; applied is how much has been, and syncClock
// applies the difference (in whole milliseconds) with shortenScript.
type realBackend struct {
	srv         *redisserver.Server
	dir         string
	persistence bool
	clock       *nodeClock
	admin       *redis.Client
	applied     time.Duration // clock offset already applied to the keys
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

func (b *realBackend) start(ctx context.Context) error { return b.srv.Restart(ctx) }

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

func (b *realBackend) emulatesClock() bool { return true }

func (b *realBackend) close() error { return b.srv.Close() }
