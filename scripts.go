package redlock

import "github.com/redis/go-redis/v9"

// The Lua scripts run atomically on each node. Every script that changes a lock
// first checks the owner value, so a client can only ever touch its own lock
// (Redlock spec: "remove the key only if it exists and its value is still the
// random value we expect").
//
// Return codes, shared by all scripts so quorum.go can read them in one place:
//
//	1   the operation applied (granted, released, extended, fenced)
//	0   the key is not there: it expired, was released, or was never set (not held)
//	-1  the key is held by another owner value (taken)
//
// Keys: KEYS[1] is the lock key, KEYS[2] the key's fencing counter (see
// fenceKey). Both are named by the client so Redis Cluster can route the script
// to the slot that owns them.
const (
	codeApplied = 1
	codeNotHeld = 0
	codeTaken   = -1
)

// acquireScript sets the lock key if it is free. ARGV[1] is the owner value,
// ARGV[2] the TTL in milliseconds. It returns {code, counter}: counter is the
// key's fencing counter on this node, read in the same atomic step as the SET
// NX, so a later grant on this node reads a counter at least as high as any
// write-back that happened while this grant's key was alive.
//
// A key that already holds our own owner value (a grant from an earlier
// attempt of the same Acquire whose reply was lost and whose clean-up did not
// reach the node) is re-granted with a fresh TTL rather than reported taken.
var acquireScript = redis.NewScript(`
local ok = redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if not ok then
  if redis.call('GET', KEYS[1]) ~= ARGV[1] then
    return {-1, 0}
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local c = redis.call('GET', KEYS[2])
if not c then
  return {1, 0}
end
return {1, tonumber(c)}
`)

// fenceScript writes a fencing token back to a node: the counter becomes
// max(counter, ARGV[2]), but only while the node still holds our lock
// (ARGV[1] is the owner value). The owner check orders the write before any
// later grant on this node, which is what makes tokens increase across
// holders; see docs/fencing.md.
var fenceScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v then return -1 end
  return 0
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if c < tonumber(ARGV[2]) then
  redis.call('SET', KEYS[2], ARGV[2])
end
return 1
`)

// releaseScript deletes the lock key if ARGV[1] is its owner value.
var releaseScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
if v then return -1 end
return 0
`)

// extendScript resets the lock key's TTL to ARGV[2] milliseconds if ARGV[1] is
// its owner value. It never creates the key: an expired lock stays expired.
var extendScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if v then return -1 end
return 0
`)

// inspectScript reads a lock's state on one node without changing it, for
// Client.Inspect: {owner value or "", PTTL of the lock key in milliseconds
// (-2 missing, -1 no expiry), fencing counter or ""}. It does not use the
// return codes above.
var inspectScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local t = redis.call('PTTL', KEYS[1])
local f = redis.call('GET', KEYS[2])
return {v or '', t, f or ''}
`)
