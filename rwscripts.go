package redlock

import "github.com/d3b93e30/redlock/internal/nodecall"

// The scripts of the read/write lock (rwmutex.go). Each takes the lock's
// five keys on a node, all in the name's hash slot (rwKeys):
//
//	KEYS[1]  the writer key (the name, as a mutex's): the writer's owner value, PX its TTL
//	KEYS[2]  the fencing counter, shared by readers and writers
//	KEYS[3]  the amnesia guard's epoch (acquireScript's rules)
//	KEYS[4]  the readers: a sorted set of owner value → expiry (node ms)
//	KEYS[5]  the waiting writers: a sorted set of intent → expiry (node ms)
//
// Every key expires: the writer key at its TTL, the two sets at their
// latest member's expiry (their TTL is never shorter than it), the counter
// and the epoch after the retention. Expired members are dropped by every
// acquisition before it decides. ARGV[1] is always the owner value.

// rwAcquireLua is one node's vote for a reader (ARGV[8] = "r") or a writer
// ("w"). ARGV[2..7] are acquireScript's (TTL ms, quarantine ms or -1,
// retention ms, "1" with fencing, proposed seed, seed + 1); ARGV[9] is the
// writer's intent ("" for none) and ARGV[10] its TTL in ms.
//
// A reader is granted when no writer holds the key and no writer waits (a
// live intent): it joins the readers with the expiry now + TTL, and its
// counter is the fencing counter as it stands (the last writer's token; a
// reader never increments it). A writer is granted when no writer holds the
// key and no reader is live: it sets the key, drops its own intent and
// increments the counter (seeded as acquireScript seeds it). A writer
// refused posts its intent, if it has one, so that new readers wait.
// Either grant applies the epoch rules of acquireScript.
//
// Replies: {1, counter, epoch state, epoch age ms} for a grant, with the
// node's marker id after them when the epoch is not trusted and the node
// has a marker (as acquireScript's reply: the per-node rule,
// incarnation.go); {-1, the writer's owner value or "", live readers,
// waiting writers} when refused.
const rwAcquireLua = luaGrantRules + `
local t = clock()
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
local ttl = tonumber(ARGV[2])
local r = tonumber(ARGV[4])
local w = redis.call('GET', KEYS[1])
local readers = redis.call('ZCARD', KEYS[4])
local waiting = redis.call('ZCARD', KEYS[5])
local c = 0
if ARGV[8] == 'r' then
  if w or waiting > 0 then
    return {-1, w or '', readers, waiting}
  end
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[4]) < ttl then
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
  if ARGV[5] == '1' then
    local v = redis.call('GET', KEYS[2])
    if v then
      c = tonumber(v)
      redis.call('PEXPIRE', KEYS[2], r)
    end
  end
else
  if w or readers > 0 then
    if ARGV[9] ~= '' then
      local it = tonumber(ARGV[10])
      redis.call('ZADD', KEYS[5], now + it, ARGV[9])
      if redis.call('PTTL', KEYS[5]) < it then
        redis.call('PEXPIRE', KEYS[5], it)
      end
    end
    return {-1, w or '', readers, waiting}
  end
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  if ARGV[9] ~= '' then
    redis.call('ZREM', KEYS[5], ARGV[9])
  end
  if ARGV[5] == '1' then
    c = seeded(KEYS[2], redis.call('INCR', KEYS[2]), r)
  end
end
local q = tonumber(ARGV[3])
local st, age = 0, 0
if q >= 0 then
  st, age = epoch(KEYS[3], ARGV[1], q, r)
end
if st ~= 0 then
  local m = marker()
  if m then
    return {1, c, st, age, m}
  end
end
return {1, c, st, age}
`

// luaRWHeld is a fragment of the scripts below: held(owner, mode) reports
// whether this node holds owner's lock: the writer key holds it (mode
// "w"), or it is a live reader ("r"); and, when not, whether a writer
// holds the key (taken).
const luaRWHeld = `
local function nowMs()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function held(owner, mode)
  if mode == 'w' then
    local v = redis.call('GET', KEYS[1])
    return v == owner, v ~= false and v ~= owner
  end
  local s = redis.call('ZSCORE', KEYS[4], owner)
  if s and tonumber(s) > nowMs() then
    return true, false
  end
  return false, redis.call('EXISTS', KEYS[1]) == 1
end
`

// rwReleaseLua deletes owner's hold (ARGV[2] the mode): the writer key if
// it holds ARGV[1], or the reader's member. ARGV[3] is "1" to also do the
// acquisition's follow-up writes where it deletes (counter := max(counter,
// ARGV[4]), epoch trusted, only where they exist: the release may overtake
// them), "0" for none, "undo" for a failed attempt's clean-up, which tells
// no waiter. Otherwise, when the node is left free for a writer (a writer
// released, or the last reader left), it tells the longest-waiting writer
// (a Lock, or a Client.Acquire of the name), or when no writer waits,
// every waiting reader (luaWakeNext with shared, passing over ARGV[5] and
// after): a writer waiting behind readers gets the lock as the last of
// them leaves, before readers that its intent refuses even if they came
// first, and readers waiting behind a writer all go together when it
// leaves. Codes: 1 deleted, 2 deleted and one waiter or more told
// (codeHandedOff), -1 a writer of another owner holds the key, 0 not
// there.
const rwReleaseLua = luaWakeNext + luaRWHeld + `
local mine, taken = held(ARGV[1], ARGV[2])
if ARGV[2] == 'w' then
  if mine then redis.call('DEL', KEYS[1]) end
else
  redis.call('ZREM', KEYS[4], ARGV[1])
end
if not mine then
  if taken then return -1 end
  return 0
end
if ARGV[3] == '1' then
  local c = redis.call('GET', KEYS[2])
  if c and tonumber(c) < tonumber(ARGV[4]) then
    redis.call('SET', KEYS[2], ARGV[4], 'KEEPTTL')
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HSET', KEYS[3], 'trusted', '1')
  end
end
if ARGV[3] == 'undo' then return 1 end
if ARGV[2] == 'r' then
  redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', nowMs())
  if redis.call('EXISTS', KEYS[4]) == 1 then return 1 end
end
return wakeNext(KEYS[1], ARGV[1], 5, true)
`

// rwExtendLua makes owner's hold (ARGV[4] the mode) live at least ARGV[2]
// more ms, never shorter, and gives the counter and the epoch the
// retention ARGV[3] (ms): the writer key's PTTL, or the reader's expiry
// (and the readers set's TTL with it). It never revives an expired hold.
// A waiting writer does not stop a reader's extension: readers that hold
// keep holding; only new readers wait. Codes: 1 extended, -1 a writer of
// another owner holds the key, 0 not there.
const rwExtendLua = luaRWHeld + `
local mine, taken = held(ARGV[1], ARGV[4])
if not mine then
  if taken then return -1 end
  return 0
end
local ttl = tonumber(ARGV[2])
if ARGV[4] == 'w' then
  if redis.call('PTTL', KEYS[1]) < ttl then
    redis.call('PEXPIRE', KEYS[1], ttl)
  end
else
  local until_ = nowMs() + ttl
  if tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1])) < until_ then
    redis.call('ZADD', KEYS[4], 'XX', until_, ARGV[1])
  end
  if redis.call('PTTL', KEYS[4]) < ttl then
    redis.call('PEXPIRE', KEYS[4], ttl)
  end
end
local r = tonumber(ARGV[3])
redis.call('PEXPIRE', KEYS[2], r)
redis.call('PEXPIRE', KEYS[3], r)
return 1
`

// rwFenceLua is fenceScript for the read/write lock: only while this node
// holds owner's hold (ARGV[5] the mode), the counter becomes max(counter,
// ARGV[2]) unless that is "0", the epoch is vouched for when ARGV[3] is
// "1", both with the retention ARGV[4] (ms). A reader's write-back is what
// puts its token (the last writer's) on a majority, so that every later
// writer, whose majority meets it, increments past it. Codes: 1 applied,
// -1 / 0 as rwExtendScript.
const rwFenceLua = luaLiftAndVouch + luaRWHeld + `
local mine, taken = held(ARGV[1], ARGV[5])
if not mine then
  if taken then return -1 end
  return 0
end
return liftAndVouch(ARGV[2], ARGV[3], tonumber(ARGV[4]))
`

// rwUnwaitLua withdraws the writer's intent ARGV[1] from the waiting
// writers (a waiting Lock that gave up). Codes: 1 withdrawn, 0 not there.
const rwUnwaitLua = `
return redis.call('ZREM', KEYS[5], ARGV[1])
`

// The read/write lock's scripts.
var (
	rwAcquireScript = nodecall.NewScript(rwAcquireLua)
	rwReleaseScript = nodecall.NewScript(rwReleaseLua)
	rwExtendScript  = nodecall.NewScript(rwExtendLua)
	rwFenceScript   = nodecall.NewScript(rwFenceLua)
	rwUnwaitScript  = nodecall.NewScript(rwUnwaitLua)
)
