package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/d3b93e30/redlock/fencing"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// redisStoreKey is the fenced value's key on a RedisStore's server.
const redisStoreKey = "chaos:fenced"

// RedisStore is a FencedStore on a redis-server of its own (not one of the
// lock's nodes): every write is fencing.SetIfNewer, the compare-and-set the
// fencing package ships (a Lua script that refuses a lower token and stores
// the value with its token in one step). Its methods are safe for
// concurrent use. Close it when done.
type RedisStore struct {
	srv *redisserver.Server
	rdb *redis.Client

	closeOnce sync.Once
	closeErr  error
}

// StartRedisStore starts a redis-server for a RedisStore on a free loopback
// port (binary "" looks it up on PATH), verified by pid like the cluster's
// nodes, with persistence on (appendfsync always: an accepted write is on
// disk). ctx bounds the start. It returns the error of starting the server.
func StartRedisStore(ctx context.Context, binary string) (*RedisStore, error) {
	srv, err := redisserver.Start(ctx, redisserver.Options{Binary: binary, Persistence: true})
	if err != nil {
		return nil, fmt.Errorf("chaos: fenced store: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr:                     srv.Addr(),
		Protocol:                 2,
		DisableIdentity:          true,
		MaxRetries:               -1, // a write's outcome must be known, not retried
		DialTimeout:              time.Second,
		ReadTimeout:              storeTimeout,
		WriteTimeout:             storeTimeout,
		ContextTimeoutEnabled:    true,
		PoolSize:                 64,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	return &RedisStore{srv: srv, rdb: rdb}, nil
}

// Name says "fencing.SetIfNewer on redis-server pid N (its own)".
func (s *RedisStore) Name() string {
	return fmt.Sprintf("fencing.SetIfNewer on redis-server pid %d (its own)", s.srv.Pid())
}

// Reset deletes the fenced value and its token.
func (s *RedisStore) Reset(ctx context.Context) error {
	return s.rdb.Del(ctx, redisStoreKey).Err()
}

// Write stores a value with token through fencing.SetIfNewer: accepted
// unless the stored token is higher (fencing.ErrStale). Any other error is
// returned.
func (s *RedisStore) Write(ctx context.Context, token uint64) (bool, error) {
	err := fencing.SetIfNewer(ctx, s.rdb, redisStoreKey, token, "written with "+strconv.FormatUint(token, 10))
	switch {
	case err == nil:
		return true, nil
	case isStale(err):
		return false, nil
	}
	return false, err
}

// Highest returns the token stored with the value, 0 before any write.
func (s *RedisStore) Highest(ctx context.Context) (uint64, error) {
	_, token, err := fencing.GetWithToken(ctx, s.rdb, redisStoreKey)
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return token, err
}

// Close stops the store's server (by its pid) and closes the connection.
// Later calls return the first one's result.
func (s *RedisStore) Close() error {
	s.closeOnce.Do(func() { s.closeErr = errors.Join(s.rdb.Close(), s.srv.Close()) })
	return s.closeErr
}
