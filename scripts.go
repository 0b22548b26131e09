package redlock

import "github.com/d3b93e30/redlock/internal/nodecall"

// The Lua scripts run atomically on each node. Every script that changes a lock
// first checks the owner value, so a client can only ever touch its own lock
// (Redlock spec: "remove the key only if it exists and its value is still the
// random value we expect").
//
// The scripts answer with the return codes below (codeTaken...), read in one
// place (classify); inspectScript alone answers with the state it read, and
// acquireScript encodes its grants (see there).
//
// Keys: KEYS[1] is the lock key, KEYS[2] the key's fencing counter (see
// fenceKey), KEYS[3] the key's epoch on this node (see epochKey), a hash with
// `born` (node time in ms when it was created), `by` (the owner value of the
// attempt whose grant created it, absent when a write-back created it),
// `trusted` ("1" once a successful acquisition vouched for this node's copy
// of the key's history) and `void` ("1" until a holder vouches for it: a
// grant creates the epoch void; see acquireScript).
// All are named by the client so Redis Cluster can route the script to the
// slot that owns them. The counter and the epoch expire after the retention
// (WithRetention) once no grant, extension or write-back touches them.

// The return codes: what a script answered on one node (reply.code), each
// with one meaning. codeQuarantined is made by the client from an acquire
// reply (acquisition.grant); no script returns it.
const (
	codeTaken       = -1 // the key is held by another owner value (OutcomeTaken)
	codeNotHeld     = 0  // the key is not there: expired, released, never set (OutcomeNotHeld)
	codeApplied     = 1  // the operation applied: granted, released, extended, fenced (OutcomeGranted)
	codeHandedOff   = 2  // a release script deleted the key and told a waiter (notify.go; OutcomeGranted)
	codeQuarantined = 3  // a grant from a node quarantined by the amnesia guard (OutcomeQuarantined)
)

// luaHelpers holds a Lua fragment the scripts below share: micros(t) is the
// time t that TIME returned, in microseconds, as a decimal string built from
// its two fields without floating point (Lua numbers would print 16 digits
// as "1.7e+15").
const luaHelpers = `
local function micros(t)
  return t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
end
`

// luaGrantRules is the part of a grant that acquireScript,
// multiAcquireScript and rwAcquireScript share, so that they cannot drift
// apart; all take acquireScript's ARGV. clock() is the node's TIME, read
// once per script.
// seeded(fk, c, r) finishes a grant's counter fk, just incremented to c:
// a counter that did not exist (c is 1) is seeded by the rules of
// acquireScript, and the counter gets the retention r (ms); it returns the
// counter. epoch(ek, owner, q, r) reads and updates the key's epoch ek for
// a grant to owner with the quarantine q (ms) and returns its state
// (epochTrusted...), its age in ms and whether it was created just now.
// marker() is the node's marker id (incarnation.go), nil when the marker
// is missing (or unreadable): a grant whose epochs are not all trusted
// returns it, read in the same call, so that the client's per-node rule
// (Client.nodeVote) sees a flush since it read the marker.
const luaGrantRules = luaHelpers + `
local clockT
local function clock()
  if not clockT then clockT = redis.call('TIME') end
  return clockT
end
local function seeded(fk, c, r)
  if c ~= 1 then
    redis.call('PEXPIRE', fk, r)
    return c
  end
  -- the counter did not exist: seed it
  local t = clock()
  -- the node's clock in microseconds minus the proposal: exact, since
  -- both are below 2^53
  local d = tonumber(t[1]) * 1000000 + tonumber(t[2]) - tonumber(ARGV[6])
  if d >= -25000 and d <= 25000 then
    redis.call('SET', fk, ARGV[7], 'PX', r) -- the proposal + 1
    return tonumber(ARGV[7])
  end
  c = redis.call('INCRBY', fk, micros(t)) -- 1 + now
  redis.call('PEXPIRE', fk, r)
  return c
end
local function epoch(ek, owner, q, r)
  local e = redis.call('HMGET', ek, 'born', 'trusted', 'void')
  if e[2] == '1' then
    redis.call('PEXPIRE', ek, r)
    return 0, 0, false -- trusted
  end
  local t = clock()
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  if not e[1] then -- void until a holder vouches for it
    redis.call('HSET', ek, 'born', now, 'by', owner, 'void', '1')
    redis.call('PEXPIRE', ek, r)
    return 2, 0, true -- created now: new
  end
  redis.call('PEXPIRE', ek, r)
  local age = now - tonumber(e[1])
  if age >= q then
    return 3, age, false
  end
  if e[3] then -- as if created now, but it keeps its age
    redis.call('HSET', ek, 'by', owner)
    return 2, age, false
  end
  return 1, age, false
end
local function marker()
  local m = redis.pcall('HGET', 'redlock:marker', 'id')
  if type(m) == 'string' then return m end
  return nil
end
`

// acquireLua sets the lock key if it is free. ARGV[1] is the owner value,
// ARGV[2] the TTL in milliseconds, ARGV[3] the amnesia guard's quarantine in
// milliseconds, or -1 when the guard is off, ARGV[4] the retention of the
// bookkeeping in milliseconds (see WithRetention), ARGV[5] "1" with fencing
// on, ARGV[6] the client's proposed seed and ARGV[7] that seed + 1 (see
// below; Lua would print 16-digit numbers in exponent form). It returns -1
// (an integer) when the key is taken; for a grant with the guard off or a
// trusted epoch, the counter alone (an integer, 0 with fencing off); for a
// grant that created the epoch just now, -2 - counter; for any other grant
// with the guard on, {1, counter, epoch state, epoch age in ms}; either of
// these last two, when the node has a marker (incarnation.go), is {1,
// counter, epoch state, epoch age in ms, marker id}. Integers
// spare the common replies an array (five allocations per node in go-redis's
// reader).
//
// With fencing on, a grant increments the key's fencing counter in the same
// atomic step as the SET NX and returns the new value; a counter that does
// not exist (first use on this node, the node lost its data, or the name was
// idle for the retention) is first seeded from the clock in microseconds, so
// that it starts above every token handed out before (docs/fencing.md states
// the clock assumption). The seed is the client's proposal (its clock as
// the attempt began) when it lies within 25 ms of the node's clock, either
// way (so that the nodes of one acquisition seed the same value and agree,
// with no write-back), else the node's clock. Either way it is at least the
// client's clock when the attempt began, which is what keeps a re-created
// counter above the token of a holder that had acquired before.
// A later grant on this node happens after this grant's key is gone, so it
// returns a higher counter.
//
// The epoch state says whether this node's copy of the key's history can be
// trusted (amnesia guard):
//
//	0  trusted: vouched for by a successful acquisition (or guard off)
//	1  quarantined: the epoch is younger than the quarantine, never vouched
//	   for, and not void (made by an earlier version of this library, which
//	   created epochs not void)
//	2  new: the epoch did not exist and was created now (first use of the key
//	   on this node, the node lost its data, or the name was idle for the
//	   retention), or it is void: no holder has vouched for it since it was
//	   created (a failed attempt, a grant applied after its client gave up on
//	   it, a holder that stopped before vouching), so it records no lock that
//	   a live key would not show; a void epoch keeps its age, so that a node
//	   that lost its data still leaves its quarantine on time
//	3  aged: never vouched for, but older than the quarantine, so any grant
//	   it may have forgotten has expired
//
// Each attempt uses a fresh owner value, so a key that already holds a value
// is always someone else's: taken.
const acquireLua = luaGrantRules + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
local r = tonumber(ARGV[4])
local c = 0
if ARGV[5] == '1' then
  c = redis.call('INCR', KEYS[2])
  c = seeded(KEYS[2], c, r)
end
local q = tonumber(ARGV[3])
if q < 0 then
  return c -- guard off
end
local st, age, created = epoch(KEYS[3], ARGV[1], q, r)
if st == 0 then
  return c -- trusted
end
-- the node's marker, read in the same call: a flush since the client read
-- it shows here
local m = marker()
if m then
  return {1, c, st, age, m}
end
if created then
  return -2 - c -- created now: new
end
return {1, c, st, age}
`

// Epoch states returned by acquireScript.
const (
	epochTrusted     = 0
	epochQuarantined = 1
	epochNew         = 2
	epochAged        = 3
	// epochNodeQuarantined is no script's: the client's mark of a grant
	// from a node quarantined as a whole (incarnation.go), whatever its
	// epoch said.
	epochNodeQuarantined = 4
)

// luaLiftAndVouch is what fenceScript and reputScript do once they know the
// node holds our lock: liftAndVouch(tok, vouch, r) sets the key's counter to
// max(counter, tok) unless tok is "0", marks the node's epoch for the key
// trusted (creating it) and no longer void when vouch is "1", gives both the
// retention r (ms), and returns 1.
const luaLiftAndVouch = `
local function liftAndVouch(tok, vouch, r)
  if tok ~= '0' then
    local c = redis.call('GET', KEYS[2])
    if not c or tonumber(c) < tonumber(tok) then
      redis.call('SET', KEYS[2], tok, 'KEEPTTL')
    end
    redis.call('PEXPIRE', KEYS[2], r)
  end
  if vouch == '1' then
    local t = redis.call('TIME')
    redis.call('HSETNX', KEYS[3], 'born', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
    redis.call('HSET', KEYS[3], 'trusted', '1')
    redis.call('HDEL', KEYS[3], 'void')
    redis.call('PEXPIRE', KEYS[3], r)
  end
  return 1
end
`

// fenceLua is the follow-up write of a successful acquisition on one node,
// only while the node still holds our lock (ARGV[1] is the owner value):
// with ARGV[2] other than "0" the counter becomes max(counter, ARGV[2]) (the
// token write-back), with ARGV[3] = "1" the node's epoch is marked trusted
// (the amnesia guard's vouching), and both get the retention ARGV[4] (ms).
// The owner check orders the write before any later grant on this node,
// which is what makes tokens increase across holders; see docs/fencing.md.
const fenceLua = luaLiftAndVouch + `
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v then return -1 end
  return 0
end
return liftAndVouch(ARGV[2], ARGV[3], tonumber(ARGV[4]))
`

// reputLua puts a held lock back on a node that answered "not held" to an
// extension that a majority applied (the node restarted empty, or its clock
// expired the key early): SET NX PX ARGV[2] ms with the owner value ARGV[1],
// so never over another owner's key. Where it sets the key it does what
// fenceScript does for a grant: counter := max(counter, ARGV[3]) unless
// ARGV[3] is "0", the epoch vouched for by this holder when ARGV[4] = "1",
// retention ARGV[5] ms. Codes: 1 put back, -1 taken.
const reputLua = luaLiftAndVouch + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return -1
end
return liftAndVouch(ARGV[3], ARGV[4], tonumber(ARGV[5]))
`

// luaWakeNext is the release scripts' wake-up (notify.go): wakeNext(key,
// owner, skipFrom, shared), called where the key was deleted, publishes the
// SHA1 of the released owner value to the channel of the key's waiter with
// the lowest ticket on this node (waitChannel: the key with its hash tag,
// channelKey; the fixed-length ticket is matched by '?', the key's glob
// characters are escaped), passing over the channels ARGV[skipFrom] and
// after name (the releasing Client's waiters that left, leftChannels), and
// returns 2; with no such waiter it publishes nothing and returns 1.
//
// A read/write lock's readers' tickets sort after every writer's
// (readerTicketMark), so the lowest ticket is a writer's whenever a writer
// waits. With shared true (rwReleaseScript, where the node was left free
// for a writer) and the lowest ticket a reader's, no writer waits: every
// waiting reader not passed over is told, since they can all hold at once;
// waking one left the others to sleep out their retry delay. It returns 2
// when it told one waiter or more. The mutex's scripts leave shared nil
// and tell one waiter, reader or not.
//
// The wake-up is a hint: where PUBSUB or PUBLISH fails (an ACL without
// @pubsub, a renamed command) it returns 1 (redis.pcall), since the key was
// deleted all the same; with redis.call the error ended the script after
// its DEL, and the release counted a node that applied it as failed.
//
// Cost: first PUBSUB NUMSUB of the key's presence channel (waitingChannel),
// one lookup: a key nobody waits for stops there. Only then PUBSUB CHANNELS
// with a pattern, which walks every pub/sub channel of the node, those of
// other keys' waiters and of other applications included, on Redis's one
// thread (no connection but the waiter's is written to). Measured for that
// walk on redis-server 7.0 (one release script per call, INFO commandstats
// usec_per_call, this project's 2-core test machine, before the presence
// check): 5.7 µs with no channel on the node, 68 µs with 1,000 channels of
// other keys, 970 µs with 10,000, 43 ms with 100,000. So a release of a key
// somebody waits for, on a node with many subscribed channels (many keys
// waited for at once, or another application's pub/sub), pays that, and so
// do the node's other commands, which wait behind the script.
const luaWakeNext = `
local function wakeNext(key, owner, skipFrom, shared)
  local o = string.find(key, '{', 1, true)
  local c = o and string.find(key, '}', o + 1, true)
  if not (c and c > o + 1) then key = '{' .. key .. '}' end
  local s = redis.pcall('PUBSUB', 'NUMSUB', 'redlock:waiting:' .. key)
  if type(s) ~= 'table' or s.err or s[2] == 0 then return 1 end
  local pre = 'redlock:wait:'
  local p = pre .. string.rep('?', 24) .. ':' .. (string.gsub(key, '[%*%?%[%]\\]', '\\%0'))
  local w = redis.pcall('PUBSUB', 'CHANNELS', p)
  if type(w) ~= 'table' or w.err or #w == 0 then return 1 end
  table.sort(w)
  local skip = {}
  for i = skipFrom, #ARGV do skip[ARGV[i]] = true end
  local id, told = redis.sha1hex(owner), false
  for _, ch in ipairs(w) do
    if not skip[ch] then
      local r = redis.pcall('PUBLISH', ch, id)
      if type(r) == 'table' and r.err then return 1 end
      told = true
      if not (shared and string.sub(ch, #pre + 1, #pre + 1) == 'r') then break end
    end
  end
  if told then return 2 end
  return 1
end
`

// releaseLua deletes the lock key if ARGV[1] is its owner value, and
// then tells the key's longest waiter of the release (luaWakeNext), passing
// over the channels named by ARGV[2] and after. Codes:
// 1 deleted, 2 deleted and a waiter told (codeHandedOff), -1 held by
// another owner, 0 not there. A key that expires, or that is not ours,
// tells nobody.
const releaseLua = luaWakeNext + `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return wakeNext(KEYS[1], ARGV[1], 2)
end
if v then return -1 end
return 0
`

// abandonLua is releaseScript for a failed attempt with the amnesia guard
// on (the attempt's clean-up): where it deletes our key it also marks the
// key's epoch void if our grant created it (`by` is our owner value) and no
// successful acquisition vouched for it since. Grants create epochs void
// already; this covers epochs an earlier version of this library created.
// The next grant there reports a void epoch as new (acquireScript): for the
// first-use rule the node is as it was before our SET, so a failed first use
// does not quarantine the key. Deleting the epoch instead would restart its
// age, and a node that lost its data would never leave its quarantine while
// attempts keep failing.
const abandonLua = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local e = redis.call('HMGET', KEYS[3], 'by', 'trusted')
  if e[1] == ARGV[1] and e[2] ~= '1' then
    redis.call('HSET', KEYS[3], 'void', '1')
  end
  return 1
end
if v then return -1 end
return 0
`

// releaseVouchLua is releaseScript for a lock whose acquisition vouched
// for nodes (amnesia guard): where it deletes our key it also does the
// write-back (counter := max(counter, ARGV[2]), epoch trusted), since the
// release may reach a node before the acquisition's write-back did. It only
// changes a counter and an epoch that exist, which keep their retention
// (KEEPTTL; HSET keeps a hash's TTL). Like releaseScript it tells the
// key's longest waiter where it deletes, with the same codes, passing over
// the channels named by ARGV[3] and after.
const releaseVouchLua = luaWakeNext + `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  redis.call('DEL', KEYS[1])
  local c = redis.call('GET', KEYS[2])
  if c and tonumber(c) < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[2], ARGV[2], 'KEEPTTL')
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HSET', KEYS[3], 'trusted', '1')
  end
  return wakeNext(KEYS[1], ARGV[1], 3)
end
if v then return -1 end
return 0
`

// holdLua is what Release sends instead of releaseScript while the
// lock's minimum hold (WithMinHold) has not passed: if ARGV[1] is the owner
// value, the lock key's remaining TTL becomes ARGV[2] milliseconds, the time
// left of the hold, unless less is left already: it never lengthens the key,
// so the key expires by itself at the end of the hold or sooner. With a
// third key and ARGV[3], it does releaseVouchScript's write-back (counter :=
// max(counter, ARGV[3]), epoch trusted; only where they exist). It tells no
// waiter: the key is still held. Codes: 1 shortened (or already shorter),
// -1 held by another owner, 0 not there.
const holdLua = `
local v = redis.call('GET', KEYS[1])
if v ~= ARGV[1] then
  if v then return -1 end
  return 0
end
local t = redis.call('PTTL', KEYS[1])
if t < 0 or t > tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
if ARGV[3] then
  local c = redis.call('GET', KEYS[2])
  if c and tonumber(c) < tonumber(ARGV[3]) then
    redis.call('SET', KEYS[2], ARGV[3], 'KEEPTTL')
  end
  if redis.call('EXISTS', KEYS[3]) == 1 then
    redis.call('HSET', KEYS[3], 'trusted', '1')
  end
end
return 1
`

// extendLua makes the lock key live at least ARGV[2] more milliseconds if
// ARGV[1] is its owner value, and refreshes the retention ARGV[3] (ms) of the
// key's counter and epoch. It never shortens the key's remaining TTL: an
// extension with a shorter TTL, applied late or on a minority, must not free
// the key while an earlier handle still counts on it. It never creates the
// key: an expired lock stays expired (Lock.Extend may put it back, see
// reputScript).
const extendLua = `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  local r = tonumber(ARGV[3])
  redis.call('PEXPIRE', KEYS[2], r)
  redis.call('PEXPIRE', KEYS[3], r)
  return 1
end
if v then return -1 end
return 0
`

// inspectLua reads a lock's state on one node without changing it, for
// Client.Inspect: {owner value or "", PTTL of the lock key in milliseconds
// (-2 missing, -1 no expiry), fencing counter or "", the epoch's age in ms
// or -1 when there is none, 1 if the epoch is trusted else 0, 1 if it is
// void else 0}. It does not use the return codes above.
const inspectLua = `
local v = redis.call('GET', KEYS[1])
local t = redis.call('PTTL', KEYS[1])
local f = redis.call('GET', KEYS[2])
local e = redis.call('HMGET', KEYS[3], 'born', 'trusted', 'void')
local age = -1
if e[1] then
  local now = redis.call('TIME')
  age = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(e[1])
end
local trusted = 0
if e[2] == '1' then trusted = 1 end
local void = 0
if e[3] == '1' then void = 1 end
return {v or '', t, f or '', age, trusted, void}
`

// The library's scripts, made from the sources above.
var (
	acquireScript      = nodecall.NewScript(acquireLua)
	fenceScript        = nodecall.NewScript(fenceLua)
	reputScript        = nodecall.NewScript(reputLua)
	releaseScript      = nodecall.NewScript(releaseLua)
	abandonScript      = nodecall.NewScript(abandonLua)
	releaseVouchScript = nodecall.NewScript(releaseVouchLua)
	holdScript         = nodecall.NewScript(holdLua)
	extendScript       = nodecall.NewScript(extendLua)
	inspectScript      = nodecall.NewScript(inspectLua)
	multiAcquireScript = nodecall.NewScript(multiAcquireLua)
	multiReleaseScript = nodecall.NewScript(multiReleaseLua)
	multiExtendScript  = nodecall.NewScript(multiExtendLua)
	multiFenceScript   = nodecall.NewScript(multiFenceLua)
)

// luaScript is one of the library's Lua scripts: the name the chaos
// harness's script mutants and the tests know it by, and its source.
type luaScript struct {
	name string
	src  string
	*nodecall.Script
}

// scripts lists every Lua script of the library, once.
var scripts = []luaScript{
	{"acquire", acquireLua, acquireScript},
	{"fence", fenceLua, fenceScript},
	{"reput", reputLua, reputScript},
	{"release", releaseLua, releaseScript},
	{"abandon", abandonLua, abandonScript},
	{"release-vouch", releaseVouchLua, releaseVouchScript},
	{"hold", holdLua, holdScript},
	{"extend", extendLua, extendScript},
	{"inspect", inspectLua, inspectScript},
	{"multi-acquire", multiAcquireLua, multiAcquireScript},
	{"multi-release", multiReleaseLua, multiReleaseScript},
	{"multi-extend", multiExtendLua, multiExtendScript},
	{"multi-fence", multiFenceLua, multiFenceScript},
	{"rw-acquire", rwAcquireLua, rwAcquireScript},
	{"rw-release", rwReleaseLua, rwReleaseScript},
	{"rw-extend", rwExtendLua, rwExtendScript},
	{"rw-fence", rwFenceLua, rwFenceScript},
	{"rw-unwait", rwUnwaitLua, rwUnwaitScript},
}
