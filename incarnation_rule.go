package redlock

// The per-node amnesia rule, as a pure function of what a client read from
// the nodes (planIncarnation, countIncarnation). incarnation.go reads the
// nodes and applies it; incarnation_model_test.go checks it exhaustively on
// a small model of nodes that restart and are flushed.
//
// An incarnation of a node is its server's run_id (new at every start) and
// the id of its marker, a key that a FLUSHALL or FLUSHDB removes and that
// the first client to find it missing creates again. Every other node holds
// a record of the node's incarnation, written once per incarnation; the
// client that sees it written on a majority of the other nodes marks those
// records complete, so that a later reader may trust one complete record.
//
// A node's vote counts only while its current incarnation is recorded on a
// majority of the other nodes (or on one complete record); its grant of a
// fresh name counts at once only once it is also old (freshAtOnce). A client that
// finds a different incarnation recorded for a node that has been up, or
// marked, for less than the longest TTL quarantines the node until its
// uptime and its marker age reach that TTL, and leaves the record alone
// meanwhile; after that it overwrites the record with the new incarnation.

// incID is one incarnation of a node: its server's run_id and its marker id.
type incID struct{ run, mark string }

// incRecord is what one other node holds about a node's incarnation.
type incRecord struct {
	read bool  // the other node answered
	has  bool  // it holds a record
	id   incID // the incarnation recorded
	done bool  // the record is complete: it was seen on a majority of the other nodes
}

// incRule is the rule's parameters; defaultIncRule is the product's. The
// model test breaks it on purpose through the other fields.
type incRule struct {
	// need is how many of the other nodes must hold a node's record for its
	// vote to count without a complete record: a majority of them.
	need func(others int) int
	// overwriteYoung lets a client overwrite a different record while the
	// node is young (unsafe: a restart then goes unseen).
	overwriteYoung bool
	// uptimeOnly judges a node young by its uptime alone, not its marker's
	// age too (unsafe: a flush keeps the uptime).
	uptimeOnly bool
	// youngFreshAtOnce counts a young verified node's grant of a fresh name
	// at once (unsafe: an earlier incarnation that no record names may
	// have granted the name under the per-key rule, and the lock may still
	// be live).
	youngFreshAtOnce bool
}

// defaultIncRule is the rule the library applies.
var defaultIncRule = incRule{need: func(others int) int { return others/2 + 1 }}

// incPlan is what a client does after reading a node's incarnation and its
// records on the other nodes.
type incPlan struct {
	// quarantine: a different incarnation is recorded and the node is young:
	// it may have lost locks that are still live. Its votes do not count.
	quarantine bool
	// write[j]: write the node's incarnation on other node j (missing, or
	// different while the node is old).
	write []bool
}

// young reports whether a node up for uptime and marked for markerAge
// (in any unit, compared with maxTTL in the same unit) may still have lost
// a lock that is live: it started, or lost its data, less than one longest
// TTL ago.
func (r incRule) young(uptime, markerAge, maxTTL int64) bool {
	if r.uptimeOnly {
		return uptime < maxTTL
	}
	return uptime < maxTTL || markerAge < maxTTL
}

// freshAtOnce reports whether a verified node up for uptime and marked for
// markerAge (units as in young) has its grant of a fresh name, a key it
// created just now, counted at once, with no wait for the other nodes'
// answers: only once it is old. While it is young, an earlier incarnation
// of it may have granted the name to a holder whose lock is still live:
// the records would have quarantined the node, but an incarnation is
// recorded only once a check reaches a majority of the other nodes, and
// until then the per-key rule counted the node's grants. So a young node's
// fresh grant is left to the per-key rule, which sees the holder's key on
// the other nodes.
func (r incRule) freshAtOnce(uptime, markerAge, maxTTL int64) bool {
	return r.youngFreshAtOnce || !r.young(uptime, markerAge, maxTTL)
}

// planIncarnation is the first half of the rule: self is the node's
// incarnation as read now, young what incRule.young says, recs its records
// on the other nodes (one per other node; read false where the node did not
// answer).
func (r incRule) planIncarnation(self incID, young bool, recs []incRecord) incPlan {
	p := incPlan{write: make([]bool, len(recs))}
	diff := false
	for _, rec := range recs {
		if rec.read && rec.has && rec.id != self {
			diff = true
		}
	}
	p.quarantine = diff && young && !r.overwriteYoung
	for j, rec := range recs {
		switch {
		case !rec.read:
		case !rec.has:
			p.write[j] = true
		case rec.id != self:
			p.write[j] = !young || r.overwriteYoung
		}
	}
	return p
}

// countIncarnation is the second half: after the writes, recs holds the
// node's records as they now are (the ones written included). It reports
// whether the node's votes count (not quarantined, and its incarnation on
// a majority of the others or on one complete record), and which records
// to mark complete (those holding it, once they are a majority).
func (r incRule) countIncarnation(self incID, quarantined bool, recs []incRecord) (counts bool, seal []bool) {
	same, done := 0, false
	for _, rec := range recs {
		if rec.read && rec.has && rec.id == self {
			same++
			done = done || rec.done
		}
	}
	sealed := same >= r.need(len(recs))
	if sealed {
		seal = make([]bool, len(recs))
		for j, rec := range recs {
			seal[j] = rec.read && rec.has && rec.id == self && !rec.done
		}
	}
	return !quarantined && (sealed || done), seal
}
