package fencing

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// A fenced value in Redis is a hash with two fields:
//
//	value  the value last accepted
//	token  the fencing token it came with, in decimal
//
// Both are written by one Lua script, so a reader never sees the value of one
// write with the token of another, and the comparison and the store cannot be
// split by another writer. The key is a single key, so it works unchanged on
// Redis Cluster. Do not give it a TTL and do not let it be evicted (use a
// maxmemory policy that spares it): a hash that vanishes forgets its highest
// token and would accept a stale write.

// setIfNewerScript stores ARGV[2] with token ARGV[1] in hash KEYS[1] unless
// the hash already holds a higher token. It returns {1, token} when it stored
// and {0, stored token} when it refused.
//
// Tokens are compared as decimal strings without leading zeros (as
// strconv.FormatUint writes them): a longer string is a larger number, and
// strings of equal length are compared in two parts of at most 11 and 9
// digits, which Lua's doubles hold exactly. tonumber on the whole string
// would round tokens above 2^53 and could let a lower token pass.
var setIfNewerScript = redis.NewScript(`
local function lower(a, b)
  if #a ~= #b then return #a < #b end
  local n = #a - 9
  if n <= 0 then return tonumber(a) < tonumber(b) end
  local ha, hb = tonumber(string.sub(a, 1, n)), tonumber(string.sub(b, 1, n))
  if ha ~= hb then return ha < hb end
  return tonumber(string.sub(a, n + 1)) < tonumber(string.sub(b, n + 1))
end
local cur = redis.call('HGET', KEYS[1], 'token')
if cur and lower(ARGV[1], cur) then
  return {0, cur}
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
return {1, ARGV[1]}
`)

// getWithTokenScript reads both fields of the hash in one step.
var getWithTokenScript = redis.NewScript(`
return redis.call('HMGET', KEYS[1], 'value', 'token')
`)

// SetIfNewer stores value under key, a Redis hash (fields "value" and
// "token"), if token is at least the token stored there; a missing key
// accepts any token. The comparison and the store are one atomic Lua script
// on the server, so concurrent writers end with the value of the highest
// token whatever order their commands arrive in. This is the check Kleppmann
// asks of the storage ("How to do distributed locking", 2016): the writer
// cannot know it is stale, the storage can.
//
// A lower token leaves the key unchanged and returns a *StaleError (ErrStale)
// whose Highest is the stored token. Redis and connection errors are returned
// wrapped (context errors stay visible to errors.Is); a key that holds another
// type gives Redis's WRONGTYPE error.
//
// rdb is any go-redis client that runs scripts (*redis.Client,
// *redis.ClusterClient, *redis.Ring), not a pipeline: the reply is needed at
// once. It is usually not one of the lock's nodes but the store the lock
// protects.
func SetIfNewer(ctx context.Context, rdb redis.Scripter, key string, token uint64, value string) error {
	res, err := setIfNewerScript.Run(ctx, rdb, []string{key}, strconv.FormatUint(token, 10), value).Slice()
	if err != nil {
		return fmt.Errorf("fencing: set %q: %w", key, err)
	}
	if len(res) != 2 {
		return fmt.Errorf("fencing: set %q: unexpected reply %v", key, res)
	}
	stored, ok := res[0].(int64)
	cur, ok2 := res[1].(string)
	if !ok || !ok2 {
		return fmt.Errorf("fencing: set %q: unexpected reply %v", key, res)
	}
	if stored == 1 {
		return nil
	}
	highest, err := strconv.ParseUint(cur, 10, 64)
	if err != nil {
		return fmt.Errorf("fencing: set %q: stored token %q: %w", key, cur, err)
	}
	return &StaleError{Token: token, Highest: highest}
}

// GetWithToken returns the value stored under key by SetIfNewer and the token
// it was stored with, read in one atomic step. For a key that was never
// written (no such key, or a hash with neither field) it returns redis.Nil, as
// go-redis's Get does.
func GetWithToken(ctx context.Context, rdb redis.Scripter, key string) (value string, token uint64, err error) {
	res, err := getWithTokenScript.Run(ctx, rdb, []string{key}).Slice()
	if err != nil {
		return "", 0, fmt.Errorf("fencing: get %q: %w", key, err)
	}
	if len(res) != 2 {
		return "", 0, fmt.Errorf("fencing: get %q: unexpected reply %v", key, res)
	}
	if res[0] == nil && res[1] == nil {
		return "", 0, redis.Nil
	}
	v, ok := res[0].(string)
	t, ok2 := res[1].(string)
	if !ok || !ok2 {
		return "", 0, fmt.Errorf("fencing: get %q: %q is not a fenced value (fields value and token)", key, key)
	}
	token, err = strconv.ParseUint(t, 10, 64)
	if err != nil {
		return "", 0, fmt.Errorf("fencing: get %q: stored token %q: %w", key, t, err)
	}
	return v, token, nil
}
