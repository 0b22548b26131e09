package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

// Per-node amnesia detection: a Client reads each node's incarnation (its
// server's run_id, from INFO server, and its marker, markerKey) when it
// first uses the nodes and, on the nodes Dial connects to, whenever a
// connection to the node is made (Options.OnConnect), and applies the rule
// of incarnation_rule.go with the records the other nodes hold
// (incRecordKey). A node whose incarnation is verified has lost no data
// since it was recorded: once it has also been up and marked for the
// longest TTL (old), and on the nodes Dial connects to (whose restarts
// connected sees), its grant of a key it had never seen (a fresh name)
// counts at once, with no wait for the other nodes, in every lock
// (Client.nodeVote: the mutex, the multi-key and the read/write lock);
// while it is young the per-key rule decides its fresh grants
// (incRule.freshAtOnce says why). Each
// lock's acquire script returns the node's marker with such a grant, so a
// flush since the incarnation was read is seen at that grant. A node whose
// incarnation changed while it was young is quarantined: none of its votes
// count until its uptime and its marker's age reach the longest TTL
// (incTracker.bound).
// A node whose incarnation cannot be read (INFO denied or hidden, a cluster
// or ring client, keys it may evict) is treated as before: the per-key
// first-use rule (quorum.go, brandNew) decides for it.

// markerKey is the node's marker: a hash with `id` (random) and `born` (the
// node's time in ms when it was created). It never expires; a FLUSHALL or
// FLUSHDB removes it.
const markerKey = "redlock:marker"

// incRecordKey is the key, on another node, of the record of node name's
// incarnation: a hash with `run`, `mark` and `done` ("1" once complete).
// Clients must name the nodes alike (the same addresses) to share records.
func incRecordKey(name string) string { return "redlock:inc:" + name }

// incStatus is what a Client knows of a node's incarnation.
type incStatus uint8

const (
	incUnknown     incStatus = iota // not read yet, or unreadable: the per-key rule decides
	incVerified                     // recorded on a majority of the others: votes count, fresh ones at once once it is old
	incQuarantined                  // a new incarnation, young: no vote counts until the quarantine ends
	incChanged                      // a new incarnation was seen and is being checked: no vote counts
)

var incStatusNames = [...]string{"unknown", "verified", "quarantined", "changed"}

func (s incStatus) String() string { return incStatusNames[s] }

// nodeIncarnation is one node's incarnation as this Client knows it: the
// view another part of the library (a health view) may read, through
// Client.incarnations.
type nodeIncarnation struct {
	Node             string
	Status           incStatus
	RunID, MarkerID  string
	Uptime           time.Duration // the node's uptime when read
	MarkerAge        time.Duration // its marker's age when read
	ReadAt           time.Time     // when it was read (zero: never)
	QuarantinedUntil time.Time     // zero unless quarantined
	Reason           string        // why the status is unknown, when it is
}

// incTracker keeps every node's incarnation for one Client.
type incTracker struct {
	c     *Client
	mu    sync.Mutex
	nodes []nodeIncarnation
	busy  []bool // a check of the node is running
	// seen is the run_id the connections made to the node since its
	// check started read ("" none; "?" unreadable, or two different ones):
	// the check compares it with the run_id it read (run).
	seen []string
	told []bool // the node's unreadable incarnation was logged
	once sync.Once
	// longest is the longest TTL this Client has used (ns).
	longest time.Duration
	// watched: the nodes' restarts are seen on reconnecting (connected,
	// installed by Dial). Set before the Client is used.
	watched bool
}

func newIncTracker(c *Client) *incTracker {
	t := &incTracker{c: c, nodes: make([]nodeIncarnation, len(c.nodes)), busy: make([]bool, len(c.nodes)), seen: make([]string, len(c.nodes)), told: make([]bool, len(c.nodes))}
	for i, n := range c.nodes {
		t.nodes[i].Node = n.Name
	}
	return t
}

// freshAtOnce reports whether the node, as read at n.ReadAt, has been up
// and marked for bound at now, so that its grant of a fresh name counts at
// once (incRule.freshAtOnce).
func (n *nodeIncarnation) freshAtOnce(now time.Time, bound time.Duration) bool {
	since := now.Sub(n.ReadAt)
	return defaultIncRule.freshAtOnce(int64(n.Uptime+since), int64(n.MarkerAge+since), int64(bound))
}

// incarnations returns every node's incarnation as this Client knows it.
func (c *Client) incarnations() []nodeIncarnation {
	if c.inc == nil {
		return nil
	}
	c.inc.mu.Lock()
	defer c.inc.mu.Unlock()
	return append([]nodeIncarnation(nil), c.inc.nodes...)
}

// bound is the TTL that bounds a quarantine: the longest TTL any holder may
// use, which is the larger of the guard's quarantine (WithQuarantine,
// default DefaultQuarantine: state the cluster's longest TTL there) and the
// longest TTL this Client has used.
func (t *incTracker) bound() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return max(t.c.cfg.quarantine, t.longest)
}

// use notes a TTL this Client acquires with and, the first time, starts
// reading every node's incarnation (in the background: the first
// acquisitions go by the per-key rule meanwhile).
func (t *incTracker) use(ttl time.Duration) {
	t.mu.Lock()
	t.longest = max(t.longest, ttl)
	t.mu.Unlock()
	t.once.Do(func() {
		for i := range t.nodes {
			t.check(i)
		}
	})
}

// incSnap is what a Client knew of a node's incarnation when it sent the
// node a grant's call (incTracker.snapshot).
type incSnap struct {
	status incStatus
	mark   string
}

// snapshot returns node i's status and marker id now, before a call is sent.
func (t *incTracker) snapshot(i int) incSnap {
	t.mu.Lock()
	defer t.mu.Unlock()
	return incSnap{t.nodes[i].Status, t.nodes[i].MarkerID}
}

// vote is what node i's grant counts for, given what was known of the node
// when the call was sent (snap) and the marker the acquire script returned
// with it (hasMark false: none was read): the node's status, the more
// cautious of then and now (quarantined or changed, then unknown, then
// verified), and, when its votes do not count, the time left.
func (t *incTracker) vote(i int, snap incSnap, mark string, hasMark bool) (incStatus, time.Duration) {
	bound := t.bound()
	t.mu.Lock()
	n := &t.nodes[i]
	st, until := n.Status, n.QuarantinedUntil
	if snap.status == incVerified && hasMark && mark != snap.mark && st == incVerified && n.MarkerID == snap.mark {
		// Flushed since it was read: a new incarnation.
		t.c.cfg.logger.Warn("redlock: node lost its data (its marker changed): its votes do not count until it is checked",
			"node", n.Node)
		n.Status, st = incChanged, incChanged
	}
	if st == incVerified && snap.status != incVerified {
		st = snap.status // verified after the call was sent: judged as then
	}
	if st == incVerified && !(t.watched && n.freshAtOnce(time.Now(), bound)) {
		// Young: an earlier incarnation that no record names may have
		// granted a lock that is still live; the per-key rule decides.
		// So it does on the nodes whose restarts this Client does not see
		// (New's: no OnConnect): a restart that kept the marker (a restore
		// from an older snapshot) leaves the node verified, and old by
		// the estimate from its check, while it is young and may have
		// lost a live lock's key and epoch; only the per-key rule, which
		// sees the key on the other nodes, catches that.
		st = incUnknown
	}
	t.mu.Unlock()
	switch st {
	case incChanged:
		t.check(i)
		return st, t.bound()
	case incUnknown:
		t.mu.Lock()
		again := t.nodes[i].Reason == incTooFew && time.Since(t.nodes[i].ReadAt) >= time.Second
		t.mu.Unlock()
		if again {
			t.check(i)
		}
	case incQuarantined:
		left := time.Until(until)
		if left <= 0 {
			t.check(i)
			left = 0
		}
		return st, left
	}
	return st, 0
}

// incSnapshot is what c knows of node n's incarnation as a grant's call is
// sent to it (unknown with the guard off), for nodeVote to judge the reply.
func (c *Client) incSnapshot(n *node) incSnap {
	if c.inc == nil {
		return incSnap{}
	}
	return c.inc.snapshot(n.Idx)
}

// nodeVote applies what c knows of node n's incarnation to its grant r, the
// reply of any lock's acquire script (a mutex's, a multi-key lock's, a
// read/write lock's), so that all of them count a node's vote by one rule:
// an old verified node's grant counts however new the epochs of its keys there
// (they still get vouched for), a quarantined or changed node's does not
// count at all (epochNodeQuarantined, with the time left), and an unknown
// node's is left to the per-key rule. snap is incSnapshot's, taken before
// the call was sent; hasMark says the script read the node's marker, which
// it does with every grant whose epochs are not all trusted: mark is its
// id, "" when it is missing. quarantine is the attempt's (0: guard off).
func (c *Client) nodeVote(quarantine time.Duration, n *node, snap incSnap, r reply, mark string, hasMark bool) reply {
	if c.inc == nil || quarantine == 0 || r.Err != nil || (r.Code != codeApplied && r.Code != codeQuarantined) {
		return r
	}
	st, left := c.inc.vote(n.Idx, snap, mark, hasMark)
	switch st {
	case incVerified:
		if r.Code == codeQuarantined && hasMark {
			r.Code, r.Left = codeApplied, 0
		}
	case incQuarantined, incChanged:
		r.Code, r.Left, r.Epoch = codeQuarantined, left, epochNodeQuarantined
	}
	return r
}

// connected is the nodes Dial connects to's Options.OnConnect: it reads the
// node's run_id on the new connection, before any command is sent on it;
// a different run_id from the one recorded is a restart, and the node's
// votes stop counting until it is checked. So is a run_id that cannot be
// read: the connection goes into use all the same, and the restart it may
// follow would go unseen. While a check of the node runs, the run_id is
// also kept for the check (seen): a restart after the check read INFO
// server would otherwise go unseen, the check recording the run_id and
// uptime it read before.
func (t *incTracker) connected(i int, ctx context.Context, cn *redis.Conn) {
	t.mu.Lock()
	read := t.nodes[i].Status == incVerified || t.nodes[i].Status == incQuarantined || t.busy[i]
	t.mu.Unlock()
	if !read {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r := ""
	if info, err := cn.Info(ctx, "server").Result(); err == nil {
		r = infoField(info, "run_id")
	}
	t.mu.Lock()
	n := &t.nodes[i]
	if t.busy[i] {
		switch {
		case r == "":
			t.seen[i] = "?"
		case t.seen[i] == "":
			t.seen[i] = r
		case t.seen[i] != r:
			t.seen[i] = "?"
		}
	}
	again := (n.Status == incVerified || n.Status == incQuarantined) && r != n.RunID
	if again {
		n.Status = incChanged
		if r == "" {
			t.c.cfg.logger.Warn("redlock: node's run_id unreadable on a new connection: its votes do not count until it is checked", "node", n.Node)
		} else {
			t.c.cfg.logger.Warn("redlock: node restarted (new run_id): its votes do not count until it is checked", "node", n.Node)
		}
	}
	t.mu.Unlock()
	if again {
		t.check(i)
	}
}

// check reads node i's incarnation and its records, in the background,
// unless a check of it is running.
func (t *incTracker) check(i int) {
	t.mu.Lock()
	if t.busy[i] {
		t.mu.Unlock()
		return
	}
	t.busy[i], t.seen[i] = true, ""
	t.mu.Unlock()
	untrack := t.c.eng.Track()
	go func() {
		defer untrack()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		t.run(ctx, i)
		t.mu.Lock()
		t.busy[i] = false
		t.mu.Unlock()
	}()
}

// incMarkerLua reads the node's marker, creating it with id ARGV[1] when it
// is missing, and returns {id, age in ms}.
const incMarkerLua = `
local m = redis.call('HMGET', KEYS[1], 'id', 'born')
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not m[1] then
  redis.call('HSET', KEYS[1], 'id', ARGV[1], 'born', now)
  return {ARGV[1], 0}
end
return {m[1], now - tonumber(m[2])}
`

// incRecordLua reads a record {run, mark, done} and, with ARGV[1] = "1",
// first writes it: to run ARGV[4], mark ARGV[5] (not complete) if it holds
// run ARGV[2] and mark ARGV[3] ("" "": if it is missing); with ARGV[1] =
// "2", marks it complete if it holds run ARGV[4] and mark ARGV[5].
const incRecordLua = `
local r = redis.call('HMGET', KEYS[1], 'run', 'mark', 'done')
local run, mark = r[1] or '', r[2] or ''
if ARGV[1] == '1' and run == ARGV[2] and mark == ARGV[3] then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'run', ARGV[4], 'mark', ARGV[5])
  return {ARGV[4], ARGV[5], ''}
end
if ARGV[1] == '2' and run == ARGV[4] and mark == ARGV[5] then
  redis.call('HSET', KEYS[1], 'done', '1')
  return {run, mark, '1'}
end
return {run, mark, r[3] or ''}
`

var (
	incMarkerScript = nodecall.NewScript(incMarkerLua)
	incRecordScript = nodecall.NewScript(incRecordLua)
)

// infoReader is a node client that answers INFO (a *redis.Client).
type infoReader interface {
	Info(ctx context.Context, sections ...string) *redis.StringCmd
}

// unreadable records that node i's incarnation cannot be read, and logs it
// once: a warning when warn (keys it may evict), else at debug level, since
// a node that hides INFO is working as configured (the reason is also in
// Client.incarnations).
func (t *incTracker) unreadable(i int, why string, warn bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := &t.nodes[i]
	n.Status, n.Reason = incUnknown, why
	if !t.told[i] {
		t.told[i] = true
		log := t.c.cfg.logger.Debug
		if warn {
			log = t.c.cfg.logger.Warn
		}
		log("redlock: node's incarnation not used: a key's first use waits for every node's answer", "node", n.Node, "reason", why)
	}
}

// run is one check of node i (check).
func (t *incTracker) run(ctx context.Context, i int) {
	nd := t.c.nodes[i]
	rc, ok := nd.Client.(*redis.Client)
	if !ok {
		t.unreadable(i, "not a single-node client", false)
		return
	}
	var ir infoReader = rc
	server, err := ir.Info(ctx, "server").Result()
	if err != nil {
		t.unreadable(i, "INFO server: "+err.Error(), false)
		return
	}
	run := infoField(server, "run_id")
	upS, upErr := strconv.ParseInt(infoField(server, "uptime_in_seconds"), 10, 64)
	if run == "" || upErr != nil {
		t.unreadable(i, "INFO server shows no run_id or uptime", false)
		return
	}
	if mem, err := ir.Info(ctx, "memory").Result(); err == nil {
		if p := infoField(mem, "maxmemory_policy"); strings.HasPrefix(p, "allkeys-") || strings.HasPrefix(p, "volatile-") {
			t.unreadable(i, "maxmemory_policy "+p+" may evict lock keys", true)
			return
		}
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	mk, err := incMarkerScript.Run(ctx, rc, []string{markerKey}, hex.EncodeToString(id)).Slice()
	if err != nil || len(mk) != 2 {
		t.unreadable(i, "marker unreadable", false)
		return
	}
	mark, _ := mk[0].(string)
	ageMs, _ := mk[1].(int64)
	readAt := time.Now()
	self := incID{run, mark}
	bound := t.bound()
	uptime := time.Duration(upS) * time.Second
	markAge := time.Duration(ageMs) * time.Millisecond
	young := defaultIncRule.young(int64(uptime), int64(markAge), int64(bound))

	others := make([]int, 0, len(t.c.nodes)-1)
	for j := range t.c.nodes {
		if j != i {
			others = append(others, j)
		}
	}
	key := []string{incRecordKey(nd.Name)}
	recs := make([]incRecord, len(others))
	t.each(ctx, others, func(ctx context.Context, k int, n *node) {
		recs[k] = readRecord(incRecordScript.Run(ctx, n.Client, key, "0", "", "", "", ""))
	})
	plan := defaultIncRule.planIncarnation(self, young, recs)
	t.each(ctx, others, func(ctx context.Context, k int, n *node) {
		if plan.write[k] {
			old := recs[k].id
			recs[k] = readRecord(incRecordScript.Run(ctx, n.Client, key, "1", old.run, old.mark, run, mark))
		}
	})
	counts, seal := defaultIncRule.countIncarnation(self, plan.quarantine, recs)
	if seal != nil {
		t.each(ctx, others, func(ctx context.Context, k int, n *node) {
			if seal[k] {
				incRecordScript.Run(ctx, n.Client, key, "2", "", "", run, mark)
			}
		})
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	n := &t.nodes[i]
	was := n.Status
	n.RunID, n.MarkerID, n.Uptime, n.MarkerAge, n.ReadAt, n.Reason = run, mark, uptime, markAge, readAt, ""
	switch {
	case plan.quarantine:
		n.Status = incQuarantined
		n.QuarantinedUntil = readAt.Add(max(bound-uptime, bound-markAge))
		if was != incQuarantined {
			t.c.cfg.logger.Warn("redlock: node quarantined: it restarted or lost its data less than the longest TTL ago; its votes do not count",
				"node", n.Node, "until", n.QuarantinedUntil, "quarantine_left", n.QuarantinedUntil.Sub(readAt).Round(time.Millisecond))
		}
	case counts:
		n.Status, n.QuarantinedUntil = incVerified, time.Time{}
	default:
		// Too few of the others answered to record it: the per-key rule
		// decides for it until a later check (vote) records it.
		n.Status, n.QuarantinedUntil, n.Reason = incUnknown, time.Time{}, incTooFew
	}
	if s := t.seen[i]; s != "" && s != run {
		// A connection made during the check read another run_id, or
		// none: the node may have restarted after INFO server was read.
		n.Status = incChanged
		t.c.cfg.logger.Warn("redlock: node restarted during its check: its votes do not count until it is checked again", "node", n.Node)
	}
	if was == incQuarantined && n.Status != incQuarantined {
		t.c.cfg.logger.Info("redlock: node's quarantine ended: its votes count again", "node", n.Node, "incarnation", n.Status.String())
	}
	t.c.health.setIncarnation(i, run)
	t.c.health.setQuarantine(i, n.QuarantinedUntil)
}

// incTooFew is the reason of a node whose incarnation is recorded on too
// few of the other nodes: it is checked again at a vote a second later.
const incTooFew = "recorded on too few of the other nodes"

// each runs f for the nodes idx (k is the index in idx) at once, and waits.
func (t *incTracker) each(ctx context.Context, idx []int, f func(ctx context.Context, k int, n *node)) {
	var wg sync.WaitGroup
	for k, j := range idx {
		wg.Go(func() { f(ctx, k, t.c.nodes[j]) })
	}
	wg.Wait()
}

// readRecord reads incRecordScript's reply.
func readRecord(cmd *redis.Cmd) incRecord {
	v, err := cmd.Slice()
	if err != nil || len(v) != 3 {
		return incRecord{}
	}
	run, _ := v[0].(string)
	mark, _ := v[1].(string)
	done, _ := v[2].(string)
	return incRecord{read: true, has: run != "" || mark != "", id: incID{run, mark}, done: done == "1"}
}

// infoField returns the value of field name in an INFO reply, or "".
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
