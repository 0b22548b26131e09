package redlock

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/maphash"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// A bounded, exhaustive model check of the per-node amnesia rule
// (incarnation_rule.go): N nodes, two clients, a TTL of modelT ticks, up to
// F faults. A fault is a restart (new run_id, uptime 0, every key, the
// marker and the records on the node lost) or a flush (the same run_id,
// the uptime goes on, keys, marker and records lost). An attempt by a
// client reaches any non-empty subset of the nodes, atomically: it reads
// their markers (creating missing ones), plans and writes the records by
// the rule, sets the key where it is free, counts the votes the rule lets
// count, and takes its keys back when they are not a majority. Ages are
// clamped at the TTL, so the search covers unbounded time; the number of
// attempts is bounded, or not. The check fails if two clients ever hold
// the lock at once, and prints the trace to it shrunk to a minimal one
// (shrink).
//
// It runs in two modes. The records alone (modelCfg.perKey false): a node
// verified by its records counts at once, any other never, and attempts
// reach any nodes: the records by themselves keep the lock safe. With the
// per-key rule, the vote as the library counts it: each node also keeps
// the key's epoch (none, new with its age, trusted), lost with its data,
// and an attempt may leave the incarnation of any node it reaches unread
// (INFO unreadable, or not checked yet: no marker, no records). A verified
// node counts at once only once it is old (incRule.freshAtOnce, as
// Client.nodeVote), a quarantined one never, and any other (unread,
// recorded on too few of the others, or verified but young) by the per-key
// rule (quorum.go, brandNew; acquire.go, countVotes): its grant counts if
// its epoch is trusted, or if the key is brand new. A success vouches for
// its grants' epochs. This mode holds within the guard's documented limit
// (beyond), which a broken case shows is needed.
//
// Not modelled: a restart that keeps part of its data (a stale snapshot),
// and a client's status of a node read at one check and used at later
// votes (the check runs within each attempt). A fault here loses all the
// node's data, so within the limit the per-key rule already stops what a
// quarantine stops; the weaker records rules (too few records, overwriting
// a young node's record) are caught by the records-alone mode.

const (
	modelT    = 3 // the TTL, in ticks
	modelMaxN = 5
)

type mRec struct {
	has       bool
	run, mark uint8
	done      bool
}

type mNode struct {
	run       uint8
	up        uint8 // uptime, clamped at modelT
	marked    bool
	mark, age uint8 // marker id and age (clamped)
	key       uint8 // ticks left on the lock key; 0: none
	recs      [modelMaxN]mRec
	// With the per-key rule only (modelCfg.perKey; zero otherwise):
	ep      uint8 // the key's epoch on the node: epNone, epTrusted or epNew + its age
	emptied uint8 // ticks left of one TTL since the node lost its data; 0: longer ago, or never
}

// The key's epoch on a node (scripts.go, acquireScript) as the per-key rule
// sees it. A grant creates a missing epoch void, and a failed attempt
// leaves it void: it is reported as new, keeping its age, until a
// successful acquisition vouches for it, or until it is older than the
// quarantine (the TTL here) and counts as trusted (epochAged: its grant
// counts, and it is history).
const (
	epNone    = 0
	epTrusted = 1 // vouched for, or older than the quarantine
	epNew     = 2 // + its age in ticks (below modelT): created just now, or void
)

type mState struct {
	nodes            [modelMaxN]mNode
	held             [2]uint8 // ticks of validity left per client
	faults, attempts uint8
	unread           uint8 // attempts that left some incarnation unread
	nextRun, nextMk  uint8
}

type modelCfg struct {
	n, faults int
	attempts  int // at most; 0: any number
	rule      incRule
	guard     bool // false: the unguarded lock
	// perKey models the whole vote: a node the records do not verify (too
	// few of the others answered), or verify while it is young
	// (incRule.freshAtOnce), is judged by the per-key rule. Without it the
	// records are checked alone: a verified node counts at once however
	// young, any other never.
	perKey bool
	// unread is, with the per-key rule, how many attempts may leave the
	// incarnation of any of the nodes they reach unread: the client could
	// not read the node's INFO, or had not checked it yet. Such a node
	// answers for the key, but gets no marker and no records from this
	// attempt, and the per-key rule judges it.
	unread int
	// With the per-key rule the guard holds within its limit (beyond): an
	// acquisition beyond it is not followed, unless beyondLimit, and the
	// check then finds the failure the limit documents. Failed attempts
	// are followed wherever they reach.
	beyondLimit bool
}

func (m *modelCfg) maj() int { return m.n/2 + 1 }

// canon reduces a state to what decides its future and hashes it: the
// rule only compares a record with its node's incarnation as read now
// (planIncarnation, countIncarnation), and run_ids and marker ids are never
// reused, so of a record only whether it names the node's current
// incarnation matters (recClass), not which past one, and the ids
// themselves not at all. The clients are sorted.
func (m *modelCfg) canon(s *mState, seed maphash.Seed) [2]uint64 {
	// Nodes are alike: they are taken in the order of a signature that
	// does not depend on their index (ties in index order). A permuted
	// state is the same system, so merging the states this maps together
	// is sound; states it leaves apart are merely explored twice.
	var sig [modelMaxN]uint64
	var order [modelMaxN]int
	for i := 0; i < m.n; i++ {
		nd := &s.nodes[i]
		rows, cols := uint64(0), uint64(0)
		for j := 0; j < m.n; j++ {
			if nd.recs[j].has {
				rows += 1 + uint64(b2u(nd.recs[j].done))*8
			}
			if s.nodes[j].recs[i].has {
				cols += 1 + uint64(b2u(s.nodes[j].recs[i].done))*8
			}
		}
		sig[i] = uint64(nd.ep)<<40 | uint64(nd.emptied)<<32 |
			uint64(nd.up)<<28 | uint64(nd.key)<<24 | uint64(b2u(nd.marked))<<23 | uint64(nd.age)<<20 | rows<<10 | cols
		order[i] = i
	}
	slices.SortStableFunc(order[:m.n], func(a, b int) int { return cmp.Compare(sig[a], sig[b]) })
	buf := make([]byte, 0, 128)
	for _, i := range order[:m.n] {
		nd := &s.nodes[i]
		buf = append(buf, nd.up, nd.key, b2u(nd.marked), nd.age, nd.ep, nd.emptied)
		for _, j := range order[:m.n] {
			buf = append(buf, recClass(&s.nodes[j], nd.recs[j]))
		}
	}
	a, b := s.held[0], s.held[1]
	if a > b {
		a, b = b, a
	}
	buf = append(buf, a, b, s.faults, s.unread) // attempts: see check
	var h [2]uint64
	h[0] = maphash.Bytes(seed, buf)
	buf = binary.LittleEndian.AppendUint64(buf, 0x9e3779b97f4a7c15)
	h[1] = maphash.Bytes(seed, buf)
	return h
}

// recClass is what canon keeps of a record r about node nd: none (0), of
// a past incarnation (1) or of the current one (2), plus 2 once complete.
// A node without a marker has no current incarnation: the marker its next
// check creates is new, so every record about it names a past one.
func recClass(nd *mNode, r mRec) uint8 {
	switch {
	case !r.has:
		return 0
	case nd.marked && r.run == nd.run && r.mark == nd.mark:
		return 2 + 2*b2u(r.done)
	}
	return 1 + 2*b2u(r.done)
}

func b2u(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

func (m *modelCfg) tick(s mState) mState {
	for i := 0; i < m.n; i++ {
		nd := &s.nodes[i]
		nd.up = min(nd.up+1, modelT)
		if nd.marked { // an unmarked node's age is set when its marker is created
			nd.age = min(nd.age+1, modelT)
		}
		if nd.key > 0 {
			nd.key--
		}
		if nd.emptied > 0 {
			nd.emptied--
		}
		if nd.ep >= epNew {
			nd.ep++
			if nd.ep-epNew >= modelT {
				nd.ep = epTrusted // aged: older than the quarantine
			}
		}
	}
	for c := range s.held {
		if s.held[c] > 0 {
			s.held[c]--
		}
	}
	return s
}

func (m *modelCfg) fault(s mState, i int, restart bool) mState {
	nd := &s.nodes[i]
	if restart {
		*nd = mNode{run: s.nextRun}
		s.nextRun++
	} else {
		*nd = mNode{run: nd.run, up: nd.up}
	}
	if m.perKey {
		nd.emptied = modelT
	}
	s.faults++
	return s
}

// How a reached node's grant counts in an attempt.
const (
	voteNever       = iota // records alone: not verified
	voteAtOnce             // verified (with the per-key rule: and old): counts, however new its epoch
	votePerKey             // unread, not verified, or verified but young: the per-key rule decides
	voteQuarantined        // never counts, and its grant is history
)

// attempt is client c's attempt reaching the nodes in the bit set S, the
// incarnations of those in U (a subset) unread; it reports whether it
// acquired.
func (m *modelCfg) attempt(s mState, c int, S, U uint) (mState, bool) {
	s.attempts++
	if U != 0 {
		s.unread++
	}
	in := func(i int) bool { return S&(1<<i) != 0 }
	checked := func(i int) bool { return in(i) && U&(1<<i) == 0 }
	var how [modelMaxN]uint8
	if !m.guard {
		for i := range how {
			how[i] = voteAtOnce
		}
	} else {
		var self [modelMaxN]incID
		for i := 0; i < m.n; i++ {
			if !checked(i) {
				continue
			}
			nd := &s.nodes[i]
			if !nd.marked {
				nd.marked, nd.mark, nd.age = true, s.nextMk, 0
				s.nextMk++
			}
			self[i] = incID{modelIDs[nd.run], modelIDs[nd.mark]}
		}
		recOf := func(j, i int) incRecord { // node j's record about node i
			if !in(j) {
				return incRecord{}
			}
			r := s.nodes[j].recs[i]
			return incRecord{read: true, has: r.has, id: incID{modelIDs[r.run], modelIDs[r.mark]}, done: r.done}
		}
		others := func(i int) []int { return modelOthers[m.n][i] }
		var plans [modelMaxN]incPlan
		var buf [modelMaxN]incRecord
		for i := 0; i < m.n; i++ { // plan on what was read, before any write
			if !checked(i) {
				continue
			}
			nd := &s.nodes[i]
			recs := buf[:0]
			for _, j := range others(i) {
				recs = append(recs, recOf(j, i))
			}
			plans[i] = m.rule.planIncarnation(self[i], m.rule.young(int64(nd.up), int64(nd.age), modelT), recs)
		}
		for i := 0; i < m.n; i++ {
			if !checked(i) {
				continue
			}
			nd := &s.nodes[i]
			for k, j := range others(i) {
				if plans[i].write[k] {
					s.nodes[j].recs[i] = mRec{has: true, run: nd.run, mark: nd.mark}
				}
			}
		}
		for i := 0; i < m.n; i++ {
			if !in(i) {
				continue
			}
			if !checked(i) {
				how[i] = votePerKey // incUnknown: INFO unreadable, or not checked yet
				continue
			}
			recs := buf[:0]
			for _, j := range others(i) {
				recs = append(recs, recOf(j, i))
			}
			verified, seal := m.rule.countIncarnation(self[i], plans[i].quarantine, recs)
			for k, j := range others(i) {
				if seal != nil && seal[k] {
					s.nodes[j].recs[i].done = true
				}
			}
			nd := &s.nodes[i]
			switch {
			case plans[i].quarantine:
				how[i] = voteQuarantined
			case verified && (!m.perKey || m.rule.freshAtOnce(int64(nd.up), int64(nd.age), modelT)):
				how[i] = voteAtOnce // Client.nodeVote: however new its epoch
			case m.perKey:
				how[i] = votePerKey // incTooFew, or verified but young (incTracker.vote)
			}
		}
	}
	// The vote (quorum.go, tally; acquire.go, countVotes). sure counts the
	// grants that count whatever the others answered; byNew those that
	// count only if the key is brand new: every node reached granted on a
	// new epoch (fresh), none reported history (a trusted epoch, the key
	// taken; a quarantined node's grant is neither), and they are a majority. A "taken"
	// is never another attempt's first use here (attempts are atomic and a
	// failed one takes its keys back), so asking again (acquisition.reask)
	// would find it still taken: it stays history.
	var granted [modelMaxN]bool
	sure, byNew, fresh, history := 0, 0, 0, 0
	for i := 0; i < m.n; i++ {
		if !in(i) {
			continue
		}
		nd := &s.nodes[i]
		if nd.key > 0 {
			history++ // taken
			continue
		}
		nd.key = modelT
		granted[i] = true
		isNew := nd.ep != epTrusted
		if m.perKey && nd.ep == epNone {
			nd.ep = epNew // created now, void
		}
		switch how[i] {
		case voteAtOnce:
			sure++
		case votePerKey:
			if isNew {
				byNew++
			} else {
				sure++
			}
		}
		switch {
		case how[i] == voteQuarantined:
			// It may have lost its data: its answer is no testimony
			// either way (tally.blind), as a node not reached.
		case isNew:
			fresh++
		default:
			history++
		}
	}
	counted := sure
	brandNew := m.perKey && history == 0 && fresh >= m.maj()
	if brandNew {
		counted += byNew
	}
	if counted >= m.maj() {
		s.held[c] = modelT
		for i := 0; i < m.n; i++ {
			if granted[i] && m.perKey {
				// The holder vouches for every grant (finishGrants, sent
				// just after the decision in the product).
				s.nodes[i].ep = epTrusted
			}
		}
		return s, true
	}
	for i := 0; i < m.n; i++ {
		if granted[i] {
			s.nodes[i].key = 0 // Redlock: a failed attempt takes its keys back; the epochs it created stay, void
		}
	}
	return s, false
}

// beyond reports whether an attempt reaching S is beyond the guard's limit
// (docs/amnesia.md, Limits): the nodes it does not reach, with those
// emptied in the last TTL, are more than a minority. A key with a live
// lock may then look brand new to the per-key rule, as the limit documents
// (TestAmnesiaGuard_MajorityEmptiedOrDownLooksBrandNew); within it, a live
// lock's key, on a majority, is on a node the attempt reaches and that
// kept its data.
func (m *modelCfg) beyond(s *mState, S uint) bool {
	out := 0
	for i := 0; i < m.n; i++ {
		if S&(1<<i) == 0 || s.nodes[i].emptied > 0 {
			out++
		}
	}
	return out > m.n-m.maj()
}

// modelIDs names ids as one-byte strings, without allocating.
var modelIDs = func() (ids [256]string) {
	for i := range ids {
		ids[i] = string([]byte{byte(i)})
	}
	return ids
}()

// modelOthers[n][i] lists the nodes other than i of n.
var modelOthers = func() (o [modelMaxN + 1][modelMaxN][]int) {
	for n := 1; n <= modelMaxN; n++ {
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				if j != i {
					o[n][i] = append(o[n][i], j)
				}
			}
		}
	}
	return o
}()

// The actions, as check encodes them: 0 a tick, 1+2i node i restarts,
// 2+2i node i is flushed, attemptAct an attempt.

// attemptAct encodes client c's attempt reaching S, the incarnations of U
// unread.
func attemptAct(c int, S, U uint) uint16 { return uint16(100 + (c<<10 | int(U)<<5 | int(S))) }

// attemptOf decodes an attempt's action a (a >= 100).
func attemptOf(a uint16) (c int, S, U uint) {
	a -= 100
	return int(a >> 10), uint(a & 31), uint(a >> 5 & 31)
}

// describe says what action a did.
func (m *modelCfg) describe(a uint16) string {
	switch {
	case a == 0:
		return "tick"
	case a < 100:
		if (a-1)%2 == 0 {
			return fmt.Sprintf("node %d restarts", (a-1)/2)
		}
		return fmt.Sprintf("node %d is flushed", (a-1)/2)
	}
	c, S, U := attemptOf(a)
	set := func(S uint) string {
		var nodes []string
		for i := 0; i < m.n; i++ {
			if S&(1<<i) != 0 {
				nodes = append(nodes, fmt.Sprint(i))
			}
		}
		return "{" + strings.Join(nodes, ",") + "}"
	}
	d := fmt.Sprintf("client %c reaches %s", 'A'+c, set(S))
	if U != 0 {
		d += ", the incarnation of " + set(U) + " unread"
	}
	return d
}

// describeTrace says what a trace to two holders did, one action a line.
func (m *modelCfg) describeTrace(acts []uint16) string {
	out := make([]string, len(acts))
	for i, a := range acts {
		out[i] = m.describe(a)
	}
	out[len(out)-1] += ": acquires while the other client holds the lock"
	return strings.Join(out, "\n  ")
}

// start is a cluster just started: every node up for no time, with its
// own run_id, and nothing else.
func (m *modelCfg) start() mState {
	var s0 mState
	for i := 0; i < m.n; i++ {
		s0.nodes[i].run = uint8(i)
	}
	s0.nextRun = uint8(m.n)
	return s0
}

// step applies action a to s: it reports whether the check may take it
// from s, and whether it makes a second holder.
func (m *modelCfg) step(s mState, a uint16) (ns mState, legal, two bool) {
	switch {
	case a == 0:
		return m.tick(s), true, false
	case a < 100:
		i := int(a-1) / 2
		if i >= m.n || int(s.faults) >= m.faults {
			return s, false, false
		}
		return m.fault(s, i, (a-1)%2 == 0), true, false
	}
	c, S, U := attemptOf(a)
	switch {
	case m.attempts > 0 && int(s.attempts) >= m.attempts, c > 1, s.held[c] > 0,
		S == 0, S >= 1<<m.n, U&^S != 0, U != 0 && (!m.perKey || int(s.unread) >= m.unread):
		return s, false, false
	}
	ns, ok := m.attempt(s, c, S, U)
	if ok && m.perKey && !m.beyondLimit && m.beyond(&s, S) {
		return s, false, false // beyond the guard's limit: not followed
	}
	return ns, true, ok && s.held[1-c] > 0
}

// replay takes acts from a cluster just started. It returns how many of
// them make a second holder (the last of them does), or 0 when they do not
// or are not a trace the check may take.
func (m *modelCfg) replay(acts []uint16) int {
	s := m.start()
	for k, a := range acts {
		ns, legal, two := m.step(s, a)
		switch {
		case !legal:
			return 0
		case two:
			return k + 1
		}
		s = ns
	}
	return 0
}

// shrink makes a trace to two holders minimal: it drops an action, a node
// from an attempt, or an unread incarnation (the attempt reads it), one at
// a time, as long as what is left still makes a second holder; then it
// names the first client to attempt A.
func (m *modelCfg) shrink(acts []uint16) []uint16 {
	for smaller := true; smaller; {
		smaller = false
		for i := 0; i < len(acts) && !smaller; i++ {
			for _, cand := range m.smaller(acts, i) {
				if k := m.replay(cand); k > 0 {
					acts, smaller = cand[:k], true
					break
				}
			}
		}
	}
	for i, a := range acts {
		if a < 100 {
			continue
		}
		if c, _, _ := attemptOf(a); c == 0 {
			break
		}
		swapped := slices.Clone(acts[i:])
		for k, a := range swapped {
			if a >= 100 {
				c, S, U := attemptOf(a)
				swapped[k] = attemptAct(1-c, S, U)
			}
		}
		return append(acts[:i:i], swapped...)
	}
	return acts
}

// smaller lists the traces that are acts with action i dropped or made
// smaller by one node.
func (m *modelCfg) smaller(acts []uint16, i int) [][]uint16 {
	out := [][]uint16{slices.Delete(slices.Clone(acts), i, i+1)}
	if acts[i] < 100 {
		return out
	}
	c, S, U := attemptOf(acts[i])
	with := func(S, U uint) {
		cand := slices.Clone(acts)
		cand[i] = attemptAct(c, S, U)
		out = append(out, cand)
	}
	for j := uint(0); j < uint(m.n); j++ {
		if U&(1<<j) != 0 {
			with(S, U&^(1<<j))
		}
	}
	for j := uint(0); j < uint(m.n); j++ {
		if S&(1<<j) != 0 && S != 1<<j {
			with(S&^(1<<j), U&^(1<<j))
		}
	}
	return out
}

// check explores every state reachable from a cluster just started and
// returns the states seen and, on a second holder, the trace to it (the
// actions), shrunk.
func (m *modelCfg) check(t *testing.T, limit int) (int, []uint16) {
	seed := maphash.MakeSeed()
	s0 := m.start()
	type frame struct {
		parent int32
		act    uint16
	}
	type item struct {
		s  mState
		at int32
	}
	// A DFS over hashed states; the frames kept give the trace. A state is
	// kept with the fewest attempts it was reached with: reached again with
	// fewer, it is explored again (more attempts are left from it), unless
	// their number is not bounded.
	seen := map[[2]uint64]uint8{m.canon(&s0, seed): 0}
	frames := []frame{{parent: -1}}
	stack := []item{{s0, 0}}
	trace := func(at int32, last uint16) []uint16 {
		out := []uint16{last}
		for ; at > 0; at = frames[at].parent {
			out = append(out, frames[at].act)
		}
		slices.Reverse(out)
		if m.replay(out) != len(out) {
			t.Fatalf("model check: the trace found does not replay:\n  %s", m.describeTrace(out))
		}
		short := m.shrink(out)
		if m.replay(short) != len(short) {
			t.Fatalf("model check: the trace shrunk does not replay:\n  %s", m.describeTrace(short))
		}
		if len(short) < len(out) {
			t.Logf("model check: a trace of %d actions, shrunk to %d", len(out), len(short))
		}
		return short
	}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		s, at := it.s, it.at
		push := func(ns mState, act uint16) {
			k := m.canon(&ns, seed)
			if used, ok := seen[k]; ok && (used <= ns.attempts || m.attempts == 0) {
				return
			}
			if len(seen) >= limit {
				t.Fatalf("model check: more than %d states", limit)
			}
			seen[k] = ns.attempts
			frames = append(frames, frame{parent: at, act: act})
			stack = append(stack, item{ns, int32(len(frames) - 1)})
		}
		push(m.tick(s), 0)
		if int(s.faults) < m.faults {
			for i := 0; i < m.n; i++ {
				push(m.fault(s, i, true), uint16(1+2*i))
				push(m.fault(s, i, false), uint16(2+2*i))
			}
		}
		if m.attempts > 0 && int(s.attempts) >= m.attempts {
			continue
		}
		for c := 0; c < 2; c++ {
			if s.held[c] > 0 || (c == 1 && s.held[0] == 0) { // idle clients are alike
				continue
			}
			for S := uint(1); S < 1<<m.n; S++ {
				// U: the nodes of S whose incarnation stays unread, any
				// subset of S while the budget lasts, else none.
				all := uint(0)
				if m.perKey && int(s.unread) < m.unread {
					all = S
				}
				for U := all; ; U = (U - 1) & all {
					act := attemptAct(c, S, U)
					ns, legal, two := m.step(s, act)
					switch {
					case two:
						return len(seen), trace(at, act)
					case legal:
						push(ns, act)
					}
					if U == 0 {
						break
					}
				}
			}
		}
	}
	return len(seen), nil
}

func TestIncarnationRuleModel(t *testing.T) {
	t.Parallel()
	// The records alone, under any reachability: 3 nodes with 1 fault, any
	// number of attempts (4.9k states); 5 nodes with 2 faults, every trace
	// of up to 2 attempts (40k states, about a second under the race
	// detector), 3 with REDLOCK_MODEL_DEEP=1 (741k states).
	// With the per-key rule, within the guard's limit, the unread
	// incarnations make the state space grow fast (a node's checks are no
	// longer tied to the nodes reached: 3 nodes, any number of attempts,
	// 15k states with none unread, 233k with one attempt leaving some
	// unread, 1.1M with two), so they are bounded like the faults: 3 nodes
	// with 1 fault, every trace of up to 4 attempts of which one may leave
	// incarnations unread (157k states, about 3 s under the race
	// detector); 5 nodes with 2 faults, every trace of up to 2 attempts,
	// none unread (88k states, about 2.5 s). REDLOCK_MODEL_DEEP=1 makes
	// them any number of attempts of which 2 may leave incarnations unread
	// (1.1M states), and 2 attempts of which one may (1M states): some 80 s
	// in all under the race detector on 2 cores.
	deep := os.Getenv("REDLOCK_MODEL_DEEP") == "1"
	five, three, unread3, unread5 := 2, 4, 1, 0
	if deep {
		five, three, unread3, unread5 = 3, 0, 2, 1
	}
	cases := []struct {
		name                string
		n, faults, attempts int
		perKey              bool
		unread              int
	}{
		{"3 nodes, 1 fault", 3, 1, 0, false, 0},
		{"5 nodes, 2 faults", 5, 2, five, false, 0},
		{"3 nodes, 1 fault, per-key rule", 3, 1, three, true, unread3},
		{"5 nodes, 2 faults, per-key rule", 5, 2, 2, true, unread5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &modelCfg{n: tc.n, faults: tc.faults, attempts: tc.attempts, rule: defaultIncRule, guard: true, perKey: tc.perKey, unread: tc.unread}
			start := time.Now()
			states, tr := m.check(t, 20_000_000)
			if tr != nil {
				t.Fatalf("two holders at once after:\n  %s", m.describeTrace(tr))
			}
			t.Logf("%s: holds over %d states (%v)", tc.name, states, time.Since(start).Round(time.Millisecond))
		})
	}
}

// TestIncarnationRuleModel_Broken checks that the model check catches the
// weaker rules, and the guard beyond its limit: each must end with two
// holders.
func TestIncarnationRuleModel_Broken(t *testing.T) {
	t.Parallel()
	fewer := defaultIncRule
	fewer.need = func(others int) int { return others / 2 } // records on fewer than a majority of the others
	young := defaultIncRule
	young.overwriteYoung = true
	uptime := defaultIncRule
	uptime.uptimeOnly = true
	youngFresh := defaultIncRule
	youngFresh.youngFreshAtOnce = true
	cases := []struct {
		name                string
		n, faults, attempts int
		rule                incRule
		guard               bool
		perKey, beyondLimit bool
		unread              int
	}{
		{"no guard", 3, 1, 4, defaultIncRule, false, false, false, 0},
		{"records on fewer than a majority", 5, 2, 2, fewer, true, false, false, 0},
		{"overwrite while young", 3, 1, 5, young, true, false, false, 0},
		{"young by uptime alone", 3, 1, 5, uptime, true, false, false, 0},
		// A young verified node's fresh grant counted at once: an earlier
		// incarnation that no record names (its INFO unread) granted the
		// lock by the per-key rule and forgot it. Only the per-key rule
		// with unread incarnations can see it.
		{"young verified node's fresh grant at once", 3, 1, 2, youngFresh, true, true, false, 1},
		// The per-key rule beyond the guard's limit: the documented
		// failure, found once the check follows it.
		{"per-key rule beyond the limit", 3, 1, 0, defaultIncRule, true, true, true, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := &modelCfg{n: tc.n, faults: tc.faults, attempts: tc.attempts, rule: tc.rule, guard: tc.guard, perKey: tc.perKey, beyondLimit: tc.beyondLimit, unread: tc.unread}
			_, tr := m.check(t, 20_000_000)
			if tr == nil {
				t.Fatalf("the weaker rule %q was not caught", tc.name)
			}
			t.Logf("caught:\n  %s", m.describeTrace(tr))
		})
	}
}
