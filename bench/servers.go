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
