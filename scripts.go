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
// fenceKey), KEYS[3] the key's epoch on this node (see epochKey), a hash with
// `born` (node time in ms when it was created) and `trusted` ("1" once a
// successful acquisition vouched for this node's copy of the key's history).
// All are named by the client so Redis Cluster can route the script to the
// slot that owns them.
const (
	codeApplied = 1
	codeNotHeld = 0
	codeTaken   = -1
)

// acquireScript sets the lock key if it is free. ARGV[1] is the owner value,
// ARGV[2] the TTL in milliseconds, ARGV[3] the amnesia guard's quarantine in
// milliseconds, or -1 when the guard is off. It returns
// {code, counter, epoch state, epoch age in ms}: counter is the key's fencing
// counter on this node, read in the same atomic step as the SET NX, so a later
// grant on this node reads a counter at least as high as any write-back that
// happened while this grant's key was alive. The epoch state says whether
// this node's copy of the key's history can be trusted (amnesia guard):
//
//	0  trusted: vouched for by a successful acquisition (or guard off)
//	1  quarantined: the epoch is younger than the quarantine, never vouched for
//	2  new: the epoch did not exist and was created now (first use of the key
//	   on this node, or the node lost its data)
//	3  aged: never vouched for, but older than the quarantine, so any grant it
//	   may have forgotten has expired; its counter is not trusted
//
// Each attempt uses a fresh owner value, so a key that already holds a value
// is always someone else's: taken.
var acquireScript = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {-1, 0, 0, 0}
end
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
local q = tonumber(ARGV[3])
if q < 0 then
  return {1, c, 0, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local e = redis.call('HMGET', KEYS[3], 'born', 'trusted')
if not e[1] then
  redis.call('HSET', KEYS[3], 'born', now)
  return {1, c, 2, 0}
end
local age = now - tonumber(e[1])
if e[2] == '1' then
  return {1, c, 0, age}
end
if age >= q then
  return {1, c, 3, age}
end
return {1, c, 1, age}
`)

// Epoch states returned by acquireScript.
const (
	epochTrusted     = 0
	epochQuarantined = 1
	epochNew         = 2
	epochAged        = 3
)

// fenceScript writes a fencing token back to a node: the counter becomes
// max(counter, ARGV[2]), and with ARGV[3] = "1" the node's epoch is marked
// trusted (the amnesia guard's repair), but only while the node still holds
// our lock (ARGV[1] is the owner value). The owner check orders the write
// before any later grant on this node, which is what makes tokens increase
// across holders; see docs/fencing.md.
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
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[3], 'trusted', '1')
end
return 1
`)

// counterScript reads a key's fencing counter and whether this node's epoch
// for it is trusted: {counter, 1 if trusted else 0}. The amnesia guard uses
// it when too few granting nodes are trusted to derive a token from them.
var counterScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[2]) or '0')
if redis.call('HGET', KEYS[3], 'trusted') == '1' then
  return {c, 1}
end
return {c, 0}
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

// releaseVouchScript is releaseScript for a lock whose acquisition vouched
// for nodes (amnesia guard): where it deletes our key it also does the
// write-back (counter := max(counter, ARGV[2]), epoch trusted), since the
// release may reach a node before the acquisition's write-back did.
var releaseVouchScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local c = tonumber(redis.call('GET', KEYS[2]) or '0')
  if c < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[2], ARGV[2])
  end
  redis.call('HSET', KEYS[3], 'trusted', '1')
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
// (-2 missing, -1 no expiry), fencing counter or "", the epoch's age in ms
// or -1 when there is none, 1 if the epoch is trusted else 0}. It does not
// use the return codes above.
var inspectScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
local t = redis.call('PTTL', KEYS[1])
local f = redis.call('GET', KEYS[2])
local e = redis.call('HMGET', KEYS[3], 'born', 'trusted')
local age = -1
if e[1] then
  local now = redis.call('TIME')
  age = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(e[1])
end
local trusted = 0
if e[2] == '1' then trusted = 1 end
return {v or '', t, f or '', age, trusted}
`)
