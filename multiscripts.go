package redlock

// The scripts of the multi-key lock (multilock.go). Each takes the K keys'
// lock key, fencing counter and epoch as KEYS (lock key i is KEYS[3i-2], its
// counter KEYS[3i-1], its epoch KEYS[3i]), so that one script sets, extends
// or deletes all of them atomically on a node, and a Redis Cluster node
// routes it to the one slot that holds them all.

// multiAcquireLua sets every lock key if every one is free, else none.
// ARGV is acquireScript's: the owner value, the TTL (ms), the quarantine
// (ms, -1: guard off), the retention (ms), "1" with fencing on, the proposed
// seed and seed + 1. When a key is held it changes nothing and returns {-1,
// i, owner of key i, j, owner of key j, ...} for each held key (the owner ""
// for a key of another type). Otherwise it returns {1, c1, s1, a1, c2, s2,
// a2, ...}: per key its fencing counter (0 with fencing off), its epoch
// state (epochTrusted, ...; epochTrusted with the guard off) and its epoch's
// age in ms, with the rules of acquireScript applied to each key; when some
// key's epoch is not trusted and the node has a marker, the marker's id
// follows, as in acquireScript's reply (the per-node rule, incarnation.go).
// The SET keeps NX, a no-op after the check: a mutant that skips the check
// then sets only the free keys.
const multiAcquireLua = luaGrantRules + `
local k = #KEYS / 3
local held = {}
for i = 1, k do
  local v = redis.pcall('GET', KEYS[3 * i - 2])
  if type(v) == 'table' then v = '' end
  if v then
    held[#held + 1] = i
    held[#held + 1] = v
  end
end
if #held > 0 then
  table.insert(held, 1, -1)
  return held
end
local r = tonumber(ARGV[4])
local q = tonumber(ARGV[3])
local out = {1}
local trusted = true
for i = 1, k do
  local lk, fk, ek = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  redis.call('SET', lk, ARGV[1], 'NX', 'PX', ARGV[2])
  local c = 0
  if ARGV[5] == '1' then
    c = seeded(fk, redis.call('INCR', fk), r)
  end
  local st, age = 0, 0
  if q >= 0 then
    st, age = epoch(ek, ARGV[1], q, r)
  end
  out[#out + 1] = c
  out[#out + 1] = st
  out[#out + 1] = age
  trusted = trusted and st == 0
end
if not trusted then
  out[#out + 1] = marker() -- nil (no marker) appends nothing
end
return out
`

// luaMultiOwned is a fragment of the scripts below: owned(owner) counts
// the lock keys that hold owner, and reports whether any other holds
// something else.
const luaMultiOwned = `
local function owned(owner)
  local mine, other = 0, false
  for i = 1, #KEYS / 3 do
    local v = redis.pcall('GET', KEYS[3 * i - 2])
    if v == owner then
      mine = mine + 1
    elseif v then
      other = true
    end
  end
  return mine, other
end
`

// multiReleaseLua deletes every lock key that holds the owner value
// ARGV[1], then tells each deleted key's longest waiter (luaWakeNext, no
// channel passed over): the deletes come first, so that nothing the
// wake-up does can end the script with a key of ours left. With
// ARGV[2] = "1" it also does, where it deletes key i, what the
// acquisition's follow-up writes do (releaseVouchScript): counter :=
// max(counter, ARGV[2 + i]) and the epoch trusted, only where they exist;
// a release may overtake them. Codes:
// 1 every key was ours and is deleted, 2 the same and a waiter was told
// (codeHandedOff), -1 some key was not ours and another owner holds one,
// 0 some key was not ours and none is held by another (the keys of ours
// are deleted all the same). A failed attempt's clean-up uses it too, with
// ARGV[2] = "undo": it tells no waiter, since nobody held those keys (and
// the longest waiter may be the attempt's own call, which a wake-up on a
// majority would send straight into its next attempt, with no delay).
const multiReleaseLua = luaWakeNext + `
local k = #KEYS / 3
local ours, other = {}, false
for i = 1, k do
  local v = redis.pcall('GET', KEYS[3 * i - 2])
  if v == ARGV[1] then
    ours[#ours + 1] = i
  elseif v then
    other = true
  end
end
for _, i in ipairs(ours) do
  redis.call('DEL', KEYS[3 * i - 2])
  if ARGV[2] == '1' then
    local tok = ARGV[2 + i]
    local c = redis.call('GET', KEYS[3 * i - 1])
    if tok and c and tonumber(c) < tonumber(tok) then
      redis.call('SET', KEYS[3 * i - 1], tok, 'KEEPTTL')
    end
    if redis.call('EXISTS', KEYS[3 * i]) == 1 then
      redis.call('HSET', KEYS[3 * i], 'trusted', '1')
    end
  end
end
local woke = 1
if ARGV[2] ~= 'undo' then
  for _, i in ipairs(ours) do
    if wakeNext(KEYS[3 * i - 2], ARGV[1], #ARGV + 1) == 2 then woke = 2 end
  end
end
if #ours == k then return woke end
if other then return -1 end
return 0
`

// multiExtendLua is extendScript for every key at once, all or none:
// only when every lock key holds the owner value ARGV[1] does each live at
// least ARGV[2] more ms (never shortened), and its counter and epoch get
// the retention ARGV[3] (ms). Codes: 1 extended, -1 some key is not ours
// and another owner holds one, 0 some key is not ours and none is held by
// another (nothing changed).
const multiExtendLua = luaMultiOwned + `
local k = #KEYS / 3
local mine, other = owned(ARGV[1])
if mine < k then
  if other then return -1 end
  return 0
end
local r = tonumber(ARGV[3])
for i = 1, k do
  local lk = KEYS[3 * i - 2]
  if redis.call('PTTL', lk) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', lk, ARGV[2])
  end
  redis.call('PEXPIRE', KEYS[3 * i - 1], r)
  redis.call('PEXPIRE', KEYS[3 * i], r)
end
return 1
`

// multiFenceLua is fenceScript for every key at once, only while every
// lock key holds the owner value ARGV[1]: each key i's counter becomes
// max(counter, ARGV[3 + i]) unless that is "0", with ARGV[2] = "1" each
// key's epoch is vouched for (trusted, no longer void), and both get the
// retention ARGV[3] (ms). Codes: 1 applied, -1 / 0 as multiExtendScript.
const multiFenceLua = luaMultiOwned + `
local k = #KEYS / 3
local mine, other = owned(ARGV[1])
if mine < k then
  if other then return -1 end
  return 0
end
local r = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, k do
  local fk, ek, tok = KEYS[3 * i - 1], KEYS[3 * i], ARGV[3 + i]
  if tok ~= '0' then
    local c = redis.call('GET', fk)
    if not c or tonumber(c) < tonumber(tok) then
      redis.call('SET', fk, tok, 'KEEPTTL')
    end
    redis.call('PEXPIRE', fk, r)
  end
  if ARGV[2] == '1' then
    redis.call('HSETNX', ek, 'born', now)
    redis.call('HSET', ek, 'trusted', '1')
    redis.call('HDEL', ek, 'void')
    redis.call('PEXPIRE', ek, r)
  end
end
return 1
`
