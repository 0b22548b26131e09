// Package bench compares this module's Redlock client with other Go lock
// libraries (go-redsync/redsync, bsm/redislock) and with plain go-redis, on
// real redis-server processes it starts itself. It is a separate module so
// that users of the library never download the libraries it is compared to.
// The benchmarks are in bench_test.go; run.sh runs them and prints a table.
//
// This file starts the redis-server processes, through the root module's
// internal/redisserver: free loopback ports, persistence off, the pid
// verified through INFO server, and only ever the process it started is
// signalled.
package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// Server is one redis-server process started by StartServer; Close kills it
// and removes its directory.
type Server = redisserver.Server

// StartServer starts redis-server on a free loopback port with persistence
// off and returns once the process answering INFO server on that port is the
// one it started (see redisserver.Start).
func StartServer(ctx context.Context) (*Server, error) {
	return redisserver.Start(ctx, redisserver.Options{})
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

// NodeAge is how long a node has been up and marked, as the amnesia guard
// reads it (docs/amnesia.md, "Per-node incarnation"): its INFO server
// uptime_in_seconds, and the age of its marker, the hash redlock:marker
// whose `born` is the node's time in ms when a Client created it
// (docs/keys.md). A FLUSHALL removes the marker; the next Client to read the
// node's incarnation creates it again.
type NodeAge struct {
	Addr      string
	Uptime    time.Duration // whole seconds, as INFO gives it
	MarkerAge time.Duration // 0 when Marked is false
	Marked    bool          // the node holds a marker
}

// Old reports whether the node has been up and marked for at least bound:
// a verified node's grant of a fresh name then counts at once.
func (a NodeAge) Old(bound time.Duration) bool {
	return a.Marked && a.Uptime >= bound && a.MarkerAge >= bound
}

// Left is how long until the node is old for bound (0 once it is); the
// uptime counts from now, the marker's age only once there is a marker.
func (a NodeAge) Left(bound time.Duration) time.Duration {
	left := max(bound-a.Uptime, 0)
	if a.Marked {
		left = max(left, bound-a.MarkerAge)
	}
	return left
}

func (a NodeAge) String() string {
	if !a.Marked {
		return fmt.Sprintf("%s up %v, no marker", a.Addr, a.Uptime)
	}
	return fmt.Sprintf("%s up %v, marked %v", a.Addr, a.Uptime, a.MarkerAge.Round(time.Millisecond))
}

// markerAgeLua returns the age in ms of the marker KEYS[1] on the node's
// clock (as the library computes it), or -1 when there is none.
const markerAgeLua = `
local b = redis.call('HGET', KEYS[1], 'born')
if not b then return -1 end
local t = redis.call('TIME')
return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) - tonumber(b)
`

// MarkerKey is the node's marker (docs/keys.md).
const MarkerKey = "redlock:marker"

// IncarnationKey reports whether key is one of the amnesia guard's
// per-node keys (docs/keys.md): the node's marker, or the record
// "redlock:inc:<node>" of another node's incarnation.
func IncarnationKey(key string) bool {
	return key == MarkerKey || strings.HasPrefix(key, "redlock:inc:")
}

// ReadNodeAge reads the age of the node c is connected to.
func ReadNodeAge(ctx context.Context, c *redis.Client) (NodeAge, error) {
	a := NodeAge{Addr: c.Options().Addr}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return a, err
	}
	up := ""
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "uptime_in_seconds:"); ok {
			up = v
		}
	}
	sec, err := strconv.ParseInt(up, 10, 64)
	if err != nil {
		return a, fmt.Errorf("%s: INFO server: no uptime_in_seconds", a.Addr)
	}
	a.Uptime = time.Duration(sec) * time.Second
	ms, err := c.Eval(ctx, markerAgeLua, []string{MarkerKey}).Int64()
	if err != nil {
		return a, err
	}
	if ms >= 0 {
		a.Marked, a.MarkerAge = true, time.Duration(ms)*time.Millisecond
	}
	return a, nil
}
