// Package oracle records what happened in one chaos trial (holds, writes,
// node faults, notes) on a single process clock and judges it: overlapping
// holds, stale writes accepted by each shared resource, fencing-token order,
// acquire latency.
//
// It is the chaos harness's judge, kept apart from the harness so that the
// judge's rules read on their own and the harness's surface stays small; the
// etcd comparison (a module of its own below this repository) records its
// trials with it too. Users of the harness see its output as chaos.Report
// and chaos.History.
package oracle

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Names of the two shared resources a workload writes to. The oracle accepts
// any resource name; these two are the ones its Report summarises in fields of
// their own.
const (
	// ResourcePlain names the unfenced resource (the chaos harness's, which accepts every write).
	ResourcePlain = "plain"
	// ResourceFenced names the fenced resource (a chaos.FencedStore, by default a fencing.Register).
	ResourceFenced = "fenced"
)

// HoldID identifies one successful acquisition recorded by an Oracle. IDs
// start at 1 and increase in the order Acquired was called; the zero HoldID
// means "no hold" and is never returned by Acquired.
type HoldID int

// Oracle records the history of one chaos trial on a single process clock and
// judges it: mutual-exclusion violations, stale writes accepted by each shared
// resource, fencing-token order and acquire latency.
//
// Every time passed to an Oracle should come from time.Now() in the same
// process (so that it carries a monotonic clock reading); times are stored and
// reported as offsets from Start. Mixing times without a monotonic reading
// falls back to wall-clock subtraction, as time.Time.Sub does.
//
// Definitions used by Report and History:
//
//   - A hold's believed-held interval is [acquired, end) with
//     end = min(validUntil, released); without a release, end = validUntil.
//     If end <= acquired the interval is empty.
//   - A hold's acted interval is its believed-held interval with the end moved
//     to the time of the hold's last write (accepted or not) when that is
//     later: a holder that paused past its validity and then wrote still acted
//     as the holder (Kleppmann's GC-pause case).
//   - A shared hold (AcquiredShared: a read lock of a read/write lock) may
//     overlap other shared holds; every other hold is exclusive. Two holds
//     conflict unless both are shared.
//   - A mutual-exclusion violation is a pair of conflicting holds by
//     different clients whose acted intervals strictly overlap (an interval
//     ending exactly when the other starts does not overlap). Holds by the
//     same client never violate each other.
//   - A stale write to a resource is a write by hold H accepted by that
//     resource after the resource had already accepted a write from a hold
//     acquired strictly later than H that conflicts with H (a shared hold's
//     writes are its reads): that write had returned (its end, see
//     WroteSpan) by the time H's write started (its `at`). Writes whose
//     spans overlap may have taken effect in either order at the resource,
//     so one of them is never stale because of the other; a write recorded
//     with Wrote spans no time.
//   - A token order violation is, in order of acquisition time, an exclusive
//     hold whose token is not above the previous hold's, or a shared hold
//     whose token is below the latest exclusive hold's before it (a reader
//     carries the last writer's token); pairs where both tokens are 0
//     (fencing off) are skipped unless ExpectTokens was called.
//
// An Oracle is safe for concurrent use by any number of goroutines. The zero
// value is not usable; create one with NewOracle.
type Oracle struct {
	start time.Time

	mu       sync.Mutex
	clients  int // lanes declared with Declare
	nodes    int
	holds    []HoldRecord // holds[i].ID == i+1
	fails    []FailureRecord
	writes   []WriteRecord
	faults   []FaultRecord
	notes    []NoteRecord
	unknown  int           // events naming a HoldID that was never returned
	latest   time.Duration // latest offset seen in any event
	seenTime bool
	tokens   bool // ExpectTokens: zero tokens are not "fencing off"
}

// NewOracle returns an empty Oracle whose clock starts now (time.Now()).
func NewOracle() *Oracle {
	return &Oracle{start: time.Now()}
}

// Start returns the instant the Oracle was created; every offset in Report and
// History is measured from it.
func (o *Oracle) Start() time.Time { return o.start }

// Declare states that the trial has clients numbered 0..clients-1 and nodes
// numbered 0..nodes-1, so that History lists (and chaos.WriteSVG draws) a lane for
// each even if nothing was recorded for it. Clients and nodes that appear in
// recorded events get lanes anyway. Values <= 0 declare none; calling Declare
// again raises the counts, never lowers them.
func (o *Oracle) Declare(clients, nodes int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.clients = max(o.clients, clients)
	o.nodes = max(o.nodes, nodes)
}

// ExpectTokens states that fencing is on: every hold must carry a token that
// is higher than the previous holder's, so a pair of zero tokens counts as a
// token order violation too (a lock whose counter never moves).
func (o *Oracle) ExpectTokens() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tokens = true
}

// Extended records that the holder of hold now believes its lock valid until
// validUntil (an extension, longer or shorter, or a Lease's latest handle).
// The believed-held interval ends at the latest validUntil recorded. A call
// naming an unknown HoldID is counted in Report.UnknownHoldEvents.
func (o *Oracle) Extended(hold HoldID, validUntil time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hold(hold)
	if h == nil {
		o.unknown++
		return
	}
	h.ValidUntil = o.offset(validUntil)
	h.ValidUntilMS = durMS(h.ValidUntil)
	h.Extensions++
}

// Acquired records a successful acquisition by client and returns its HoldID.
// acquired is when the lock was handed out, validUntil its validity deadline,
// latency how long the Acquire call took (including retries), attempts how
// many attempts the call made, and token the fencing token (0 when fencing is
// off).
func (o *Oracle) Acquired(client int, token uint64, acquired, validUntil time.Time, latency time.Duration, attempts int) HoldID {
	return o.acquired(client, token, acquired, validUntil, latency, attempts, false)
}

// AcquiredShared is Acquired for a shared hold, a read lock of a read/write
// lock: it may overlap other shared holds, and its writes are reads (see
// Oracle for how it is judged).
func (o *Oracle) AcquiredShared(client int, token uint64, acquired, validUntil time.Time, latency time.Duration, attempts int) HoldID {
	return o.acquired(client, token, acquired, validUntil, latency, attempts, true)
}

func (o *Oracle) acquired(client int, token uint64, acquired, validUntil time.Time, latency time.Duration, attempts int, shared bool) HoldID {
	o.mu.Lock()
	defer o.mu.Unlock()
	id := HoldID(len(o.holds) + 1)
	h := HoldRecord{
		ID:         id,
		Client:     client,
		Shared:     shared,
		Token:      token,
		Acquired:   o.offset(acquired),
		ValidUntil: o.offset(validUntil),
		Latency:    latency,
		Attempts:   attempts,
	}
	h.LatencyMS = durMS(latency)
	h.AcquiredMS, h.ValidUntilMS = durMS(h.Acquired), durMS(h.ValidUntil)
	o.holds = append(o.holds, h)
	return id
}

// Released records that the holder of hold released the lock (or gave it up)
// at `at`. Only the first release of a hold counts; later ones are ignored. A
// release naming an unknown HoldID (including 0) is counted in
// Report.UnknownHoldEvents and otherwise ignored. A release after the validity
// deadline does not lengthen the believed-held interval.
func (o *Oracle) Released(hold HoldID, at time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hold(hold)
	if h == nil {
		o.unknown++
		return
	}
	if h.HasRelease {
		return
	}
	h.HasRelease = true
	h.Released = o.offset(at)
	h.ReleasedMS = durMS(h.Released)
}

// Failed records an Acquire call by client that failed at `at` after latency
// and attempts, for the given reason (free text, e.g. "quorum not reached" or
// "context deadline exceeded"; used to group failures in Report).
func (o *Oracle) Failed(client int, at time.Time, latency time.Duration, attempts int, reason string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	off := o.offset(at)
	o.fails = append(o.fails, FailureRecord{
		Client: client, At: off, AtMS: durMS(off),
		Latency: latency, LatencyMS: durMS(latency),
		Attempts: attempts, Reason: reason,
	})
}

// Wrote records a write made at `at` by the holder of hold to the named
// resource (ResourcePlain, ResourceFenced or any other name) carrying token,
// and whether the resource accepted it. Rejected writes still extend the
// hold's acted interval. A write naming an unknown HoldID (including 0) is
// counted in Report.UnknownHoldEvents and otherwise ignored.
func (o *Oracle) Wrote(hold HoldID, resource string, token uint64, accepted bool, at time.Time) {
	o.WroteSpan(hold, resource, token, accepted, at, at)
}

// WroteSpan is Wrote for a write that started at `at` (the time the oracle
// orders writes by) and returned at end (recorded in WriteRecord.End for
// the cross-check, which lets writes whose spans overlap happen in either
// order). An end before at is taken as at.
func (o *Oracle) WroteSpan(hold HoldID, resource string, token uint64, accepted bool, at, end time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	h := o.hold(hold)
	if h == nil {
		o.unknown++
		return
	}
	off := o.offset(at)
	o.writes = append(o.writes, WriteRecord{
		Hold: hold, Client: h.Client, Resource: resource, Token: token,
		Accepted: accepted, At: off, AtMS: durMS(off), End: max(o.offset(end), off),
	})
}

// Fault records a fault band on node from `from` to `to`, described by what
// (e.g. "killed", "amnesia", "clock +300ms", "paused"). to == from marks an
// instantaneous fault; a zero `to` means the fault lasted until the end of the
// trial (History.End). A `to` before `from` is treated as instantaneous.
func (o *Oracle) Fault(node int, what string, from, to time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := FaultRecord{Node: node, What: what, From: o.offset(from)}
	if to.IsZero() {
		f.Open = true
	} else {
		f.To = max(o.offset(to), f.From)
	}
	f.FromMS, f.ToMS = durMS(f.From), durMS(f.To)
	o.faults = append(o.faults, f)
}

// Note records a labelled instant for the timeline (e.g. "client 0 paused").
func (o *Oracle) Note(at time.Time, text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	off := o.offset(at)
	o.notes = append(o.notes, NoteRecord{At: off, AtMS: durMS(off), Text: text})
}

// offset converts t to an offset from start and tracks the latest one. The
// caller holds o.mu.
func (o *Oracle) offset(t time.Time) time.Duration {
	d := t.Sub(o.start)
	if !o.seenTime || d > o.latest {
		o.latest, o.seenTime = d, true
	}
	return d
}

// hold returns the record for id, or nil. The caller holds o.mu.
func (o *Oracle) hold(id HoldID) *HoldRecord {
	if id < 1 || int(id) > len(o.holds) {
		return nil
	}
	return &o.holds[id-1]
}

// HoldRecord is one successful acquisition as recorded by an Oracle. Times are
// offsets from Oracle.Start (negative if a caller passed a time before it);
// each has a twin in float milliseconds (the field ending in MS) for JSON
// readers.
type HoldRecord struct {
	// ID is the HoldID Acquired returned (1-based).
	ID HoldID `json:"id"`
	// Client is the client that acquired.
	Client int `json:"client"`
	// Shared marks a shared hold (AcquiredShared): a read lock.
	Shared bool `json:"shared,omitempty"`
	// Token is the fencing token (0 when fencing is off).
	Token uint64 `json:"token"`
	// Acquired is when the lock was handed out.
	Acquired time.Duration `json:"acquired_ns"`
	// AcquiredMS is Acquired in milliseconds.
	AcquiredMS float64 `json:"acquired_ms"`
	// ValidUntil is the validity deadline the client computed.
	ValidUntil time.Duration `json:"valid_until_ns"`
	// ValidUntilMS is ValidUntil in milliseconds.
	ValidUntilMS float64 `json:"valid_until_ms"`
	// Extensions counts the Extended calls for this hold; ValidUntil is
	// the last one's.
	Extensions int `json:"extensions"`
	// HasRelease reports whether Released was called for this hold; Released
	// and ReleasedMS are meaningful only then.
	HasRelease bool `json:"has_release"`
	// Released is when the holder released the lock (first release only).
	Released time.Duration `json:"released_ns"`
	// ReleasedMS is Released in milliseconds.
	ReleasedMS float64 `json:"released_ms"`
	// Latency is how long the Acquire call took.
	Latency time.Duration `json:"latency_ns"`
	// LatencyMS is Latency in milliseconds.
	LatencyMS float64 `json:"latency_ms"`
	// Attempts is how many attempts the Acquire call made.
	Attempts int `json:"attempts"`
	// BelievedEnd is the end of the believed-held interval,
	// min(ValidUntil, Released). Filled in by History; it may be before
	// Acquired (empty interval).
	BelievedEnd time.Duration `json:"believed_end_ns"`
	// BelievedEndMS is BelievedEnd in milliseconds.
	BelievedEndMS float64 `json:"believed_end_ms"`
	// ActedEnd is the end of the acted interval: BelievedEnd, or the time of
	// the hold's last write if that is later. Filled in by History.
	ActedEnd time.Duration `json:"acted_end_ns"`
	// ActedEndMS is ActedEnd in milliseconds.
	ActedEndMS float64 `json:"acted_end_ms"`
}

// FailureRecord is one failed Acquire call.
type FailureRecord struct {
	// Client is the client whose call failed.
	Client int `json:"client"`
	// At is when the call returned, as an offset from Oracle.Start.
	At time.Duration `json:"at_ns"`
	// AtMS is At in milliseconds.
	AtMS float64 `json:"at_ms"`
	// Latency is how long the call took.
	Latency time.Duration `json:"latency_ns"`
	// LatencyMS is Latency in milliseconds.
	LatencyMS float64 `json:"latency_ms"`
	// Attempts is how many attempts the call made.
	Attempts int `json:"attempts"`
	// Reason is the caller's description of the failure (free text).
	Reason string `json:"reason"`
}

// WriteRecord is one write by a holder to a shared resource.
type WriteRecord struct {
	// Hold is the writer's HoldID.
	Hold HoldID `json:"hold"`
	// Client is the client that made the hold.
	Client int `json:"client"`
	// Resource names the resource written (ResourcePlain, ResourceFenced, ...).
	Resource string `json:"resource"`
	// Token is the token sent with the write.
	Token uint64 `json:"token"`
	// Accepted reports whether the resource accepted the write.
	Accepted bool `json:"accepted"`
	// At is when the write happened, as an offset from Oracle.Start.
	At time.Duration `json:"at_ns"`
	// AtMS is At in milliseconds.
	AtMS float64 `json:"at_ms"`
	// End is when the write returned (At when only its start was recorded).
	End time.Duration `json:"end_ns"`
	// Stale is true for an accepted write that the oracle judged stale (see
	// Oracle); always false for a rejected write. Filled in by History.
	Stale bool `json:"stale"`
}

// FaultRecord is one fault band on a node.
type FaultRecord struct {
	// Node is the node the fault hit.
	Node int `json:"node"`
	// What describes the fault ("killed", "amnesia", "clock +300ms", ...).
	What string `json:"what"`
	// From is when the fault began, as an offset from Oracle.Start.
	From time.Duration `json:"from_ns"`
	// FromMS is From in milliseconds.
	FromMS float64 `json:"from_ms"`
	// To is when the fault ended; To == From marks an instantaneous fault.
	// For an Open fault History sets To to History.End (never before From).
	To time.Duration `json:"to_ns"`
	// ToMS is To in milliseconds.
	ToMS float64 `json:"to_ms"`
	// Open reports that the fault lasted until the end of the trial (Fault
	// was called with a zero `to`).
	Open bool `json:"open"`
}

// NoteRecord is a labelled instant on the timeline.
type NoteRecord struct {
	// At is the instant, as an offset from Oracle.Start.
	At time.Duration `json:"at_ns"`
	// AtMS is At in milliseconds.
	AtMS float64 `json:"at_ms"`
	// Text is the label.
	Text string `json:"text"`
}

// Violation is one mutual-exclusion violation: two conflicting holds by
// different clients whose acted intervals overlap.
type Violation struct {
	// ClientA made HoldA, the hold acquired first (ties broken by HoldID).
	ClientA int `json:"client_a"`
	// HoldA is the earlier of the two holds.
	HoldA HoldID `json:"hold_a"`
	// ClientB made HoldB; ClientB != ClientA.
	ClientB int `json:"client_b"`
	// HoldB is the later of the two holds.
	HoldB HoldID `json:"hold_b"`
	// From is the start of the overlap (HoldB's acquisition), as an offset
	// from Oracle.Start.
	From time.Duration `json:"from_ns"`
	// FromMS is From in milliseconds.
	FromMS float64 `json:"from_ms"`
	// To is the end of the overlap (the earlier of the two acted ends); always
	// after From.
	To time.Duration `json:"to_ns"`
	// ToMS is To in milliseconds.
	ToMS float64 `json:"to_ms"`
	// Believed is true when the believed-held intervals themselves overlap
	// (both clients were told they held the lock at once, e.g. after an
	// amnesia restart or a clock jump); false when only a write after
	// validity made the intervals overlap (a paused holder).
	Believed bool `json:"believed"`
}

// History is a copy of everything an Oracle recorded, with the derived fields
// (interval ends, stale flags, violations) filled in. Slices are in recording
// order, except Violations. It is a value: changing it does not affect the
// Oracle.
type History struct {
	// Start is Oracle.Start; every offset is measured from it.
	Start time.Time `json:"start"`
	// End is the latest recorded instant (including validity deadlines) as
	// an offset from Start, or 0 if nothing was recorded or everything was
	// before Start; open faults end there.
	End time.Duration `json:"end_ns"`
	// EndMS is End in milliseconds.
	EndMS float64 `json:"end_ms"`
	// Clients lists, ascending, every client declared with Oracle.Declare or
	// named by a hold or failure: one timeline lane each.
	Clients []int `json:"clients"`
	// Nodes lists, ascending, every node declared with Oracle.Declare or
	// named by a fault: one timeline lane each.
	Nodes []int `json:"nodes"`
	// Holds lists the successful acquisitions; Holds[i].ID == i+1.
	Holds []HoldRecord `json:"holds"`
	// Failures lists the failed Acquire calls.
	Failures []FailureRecord `json:"failures"`
	// Writes lists the writes naming a known hold.
	Writes []WriteRecord `json:"writes"`
	// Faults lists the node fault bands.
	Faults []FaultRecord `json:"faults"`
	// Notes lists the labelled instants.
	Notes []NoteRecord `json:"notes"`
	// Violations lists the mutual-exclusion violations, by From, then
	// HoldA, then HoldB (never nil).
	Violations []Violation `json:"violations"`
	// UnknownHoldEvents counts Released and Wrote calls naming an unknown
	// HoldID.
	UnknownHoldEvents int `json:"unknown_hold_events"`

	tokens bool // Oracle.ExpectTokens was called
}

// ResourceStats summarises the writes to one named resource.
type ResourceStats struct {
	// Writes counts every write recorded, accepted or not.
	Writes int `json:"writes"`
	// Accepted counts the writes the resource accepted.
	Accepted int `json:"accepted"`
	// Rejected counts the writes the resource refused.
	Rejected int `json:"rejected"`
	// Stale counts accepted stale writes (see Oracle); Stale <= Accepted.
	Stale int `json:"stale"`
}

// Report is the verdict on a recorded history (see Oracle for the
// definitions). Durations are given both as time.Duration (JSON: integer
// nanoseconds, keys ending in _ns) and as float milliseconds (fields ending in
// MS, keys ending in _ms). Percentiles use the nearest-rank method and are 0
// when there is no sample.
type Report struct {
	// Acquisitions counts successful Acquire calls.
	Acquisitions int `json:"acquisitions"`
	// FailedAcquires counts failed Acquire calls.
	FailedAcquires int `json:"failed_acquires"`
	// Attempts sums the attempts made by all calls, successful or not.
	Attempts int `json:"attempts"`
	// Releases counts holds that were released (at most one per hold).
	Releases int `json:"releases"`
	// FailureReasons counts failed calls by reason (nil when none failed).
	FailureReasons map[string]int `json:"failure_reasons,omitempty"`

	// Violations counts mutual-exclusion violations (pairs of holds).
	Violations int `json:"violations"`
	// BelievedViolations counts the violations whose believed-held
	// intervals themselves overlap; Violations - BelievedViolations were
	// caused only by writes after validity.
	BelievedViolations int `json:"believed_violations"`
	// ViolationList lists the violations as History.Violations does (never
	// nil, so JSON shows []).
	ViolationList []Violation `json:"violation_list"`

	// Writes counts all recorded writes.
	Writes int `json:"writes"`
	// Resources breaks the writes down by resource name (never nil).
	Resources map[string]ResourceStats `json:"resources"`
	// StaleWritesPlain counts accepted stale writes to ResourcePlain.
	StaleWritesPlain int `json:"stale_writes_plain"`
	// StaleWritesFenced counts accepted stale writes to ResourceFenced; it
	// must be 0 whenever tokens increase with acquisition order.
	StaleWritesFenced int `json:"stale_writes_fenced"`
	// RejectedWritesFenced counts writes ResourceFenced refused.
	RejectedWritesFenced int `json:"rejected_writes_fenced"`
	// ExtendedHolds counts holds whose validity was extended at least once
	// (Oracle.Extended with a later deadline than at acquisition).
	ExtendedHolds int `json:"extended_holds"`
	// TokenOrderViolations counts consecutive holds (by acquisition time)
	// whose tokens do not strictly increase, skipping pairs of zero tokens.
	TokenOrderViolations int `json:"token_order_violations"`

	// AcquireP50 is the median latency of successful calls.
	AcquireP50 time.Duration `json:"acquire_p50_ns"`
	// AcquireP99 is the 99th percentile latency of successful calls.
	AcquireP99 time.Duration `json:"acquire_p99_ns"`
	// AcquireMax is the largest latency of a successful call.
	AcquireMax time.Duration `json:"acquire_max_ns"`
	// AcquireP50MS is AcquireP50 in milliseconds.
	AcquireP50MS float64 `json:"acquire_p50_ms"`
	// AcquireP99MS is AcquireP99 in milliseconds.
	AcquireP99MS float64 `json:"acquire_p99_ms"`
	// AcquireMaxMS is AcquireMax in milliseconds.
	AcquireMaxMS float64 `json:"acquire_max_ms"`
	// CallP50 is the median latency of all calls, failed ones included.
	CallP50 time.Duration `json:"call_p50_ns"`
	// CallP99 is the 99th percentile latency of all calls.
	CallP99 time.Duration `json:"call_p99_ns"`
	// CallMax is the largest latency of any call.
	CallMax time.Duration `json:"call_max_ns"`
	// CallP50MS is CallP50 in milliseconds.
	CallP50MS float64 `json:"call_p50_ms"`
	// CallP99MS is CallP99 in milliseconds.
	CallP99MS float64 `json:"call_p99_ms"`
	// CallMaxMS is CallMax in milliseconds.
	CallMaxMS float64 `json:"call_max_ms"`

	// Faults counts the recorded fault bands.
	Faults int `json:"faults"`
	// Notes counts the recorded notes.
	Notes int `json:"notes"`
	// UnknownHoldEvents counts Released and Wrote calls naming an unknown
	// HoldID (a bug in the workload, not in the lock).
	UnknownHoldEvents int `json:"unknown_hold_events"`
	// Span is History.End: the latest recorded instant.
	Span time.Duration `json:"span_ns"`
	// SpanMS is Span in milliseconds.
	SpanMS float64 `json:"span_ms"`
}

// History returns a copy of everything recorded so far, with derived fields
// filled in. It may be called while recording continues.
func (o *Oracle) History() History {
	o.mu.Lock()
	h := History{
		Start:             o.start,
		Holds:             slices.Clone(o.holds),
		Failures:          slices.Clone(o.fails),
		Writes:            slices.Clone(o.writes),
		Faults:            slices.Clone(o.faults),
		Notes:             slices.Clone(o.notes),
		UnknownHoldEvents: o.unknown,
		tokens:            o.tokens,
	}
	if o.seenTime {
		h.End = max(o.latest, 0)
	}
	clients, nodes := o.clients, o.nodes
	o.mu.Unlock()

	h.EndMS = durMS(h.End)
	h.analyze(clients, nodes)
	return h
}

// analyze fills in the derived fields of h.
func (h *History) analyze(declaredClients, declaredNodes int) {
	h.lanes(declaredClients, declaredNodes)
	h.intervalEnds()
	h.markStaleWrites()
	h.findViolations()
}

// lanes lists the clients and nodes that get a timeline lane, and ends the
// open faults at h.End.
func (h *History) lanes(declaredClients, declaredNodes int) {
	cs := map[int]bool{}
	for i := range declaredClients {
		cs[i] = true
	}
	for _, x := range h.Holds {
		cs[x.Client] = true
	}
	for _, f := range h.Failures {
		cs[f.Client] = true
	}
	ns := map[int]bool{}
	for i := range declaredNodes {
		ns[i] = true
	}
	for _, f := range h.Faults {
		ns[f.Node] = true
	}
	h.Clients, h.Nodes = sortedLaneIDs(cs), sortedLaneIDs(ns)

	for i := range h.Faults {
		if h.Faults[i].Open {
			h.Faults[i].To = max(h.End, h.Faults[i].From)
			h.Faults[i].ToMS = durMS(h.Faults[i].To)
		}
	}
}

// intervalEnds fills in each hold's believed end (validity or release) and
// acted end (its last write, if later).
func (h *History) intervalEnds() {
	for i := range h.Holds {
		x := &h.Holds[i]
		x.BelievedEnd = x.ValidUntil
		if x.HasRelease && x.Released < x.BelievedEnd {
			x.BelievedEnd = x.Released
		}
		x.ActedEnd = x.BelievedEnd
	}
	for _, w := range h.Writes {
		x := &h.Holds[w.Hold-1]
		x.ActedEnd = max(x.ActedEnd, w.At)
	}
	for i := range h.Holds {
		x := &h.Holds[i]
		x.BelievedEndMS, x.ActedEndMS = durMS(x.BelievedEnd), durMS(x.ActedEnd)
	}
}

// markStaleWrites flags the stale writes: per resource, sweeping the
// accepted writes in order of `at`, it takes in every accepted write that
// had returned by then (in order of End) and remembers the latest
// acquisition time among their holds, and among their exclusive holds: a
// shared hold's write is stale only after an exclusive one's.
func (h *History) markStaleWrites() {
	var starts, ends []int
	for i, w := range h.Writes {
		if w.Accepted {
			starts = append(starts, i)
			ends = append(ends, i)
		}
	}
	slices.SortStableFunc(starts, func(a, b int) int { return cmp.Compare(h.Writes[a].At, h.Writes[b].At) })
	slices.SortStableFunc(ends, func(a, b int) int { return cmp.Compare(h.Writes[a].End, h.Writes[b].End) })
	type newest struct {
		acquired time.Duration
		any      bool
	}
	seen := map[string]newest{}          // any hold's
	seenExclusive := map[string]newest{} // an exclusive hold's
	next := 0                            // ends[:next] have been taken in
	for _, i := range starts {
		w := &h.Writes[i]
		for ; next < len(ends) && h.Writes[ends[next]].End <= w.At; next++ {
			done := h.Writes[ends[next]]
			held := h.Holds[done.Hold-1]
			if n := seen[done.Resource]; !n.any || held.Acquired > n.acquired {
				seen[done.Resource] = newest{held.Acquired, true}
			}
			if n := seenExclusive[done.Resource]; !held.Shared && (!n.any || held.Acquired > n.acquired) {
				seenExclusive[done.Resource] = newest{held.Acquired, true}
			}
		}
		held := h.Holds[w.Hold-1]
		n := seen[w.Resource]
		if held.Shared {
			n = seenExclusive[w.Resource]
		}
		if n.any && n.acquired > held.Acquired {
			w.Stale = true
		}
	}
}

// findViolations lists the mutual-exclusion violations: a sweep of the holds
// by the start of their acted intervals.
func (h *History) findViolations() {
	byStart := h.holdsByAcquired()
	h.Violations = []Violation{}
	for i, a := range byStart {
		if a.ActedEnd <= a.Acquired {
			continue // empty interval
		}
		for _, b := range byStart[i+1:] {
			if b.Acquired >= a.ActedEnd {
				break
			}
			if b.Client == a.Client || b.ActedEnd <= b.Acquired || (a.Shared && b.Shared) {
				continue
			}
			from, to := b.Acquired, min(a.ActedEnd, b.ActedEnd)
			if to <= from {
				continue
			}
			h.Violations = append(h.Violations, Violation{
				ClientA: a.Client, HoldA: a.ID, ClientB: b.Client, HoldB: b.ID,
				From: from, FromMS: durMS(from), To: to, ToMS: durMS(to),
				Believed: b.Acquired < min(a.BelievedEnd, b.BelievedEnd),
			})
		}
	}
	slices.SortStableFunc(h.Violations, func(x, y Violation) int {
		return cmp.Or(cmp.Compare(x.From, y.From), cmp.Compare(x.HoldA, y.HoldA), cmp.Compare(x.HoldB, y.HoldB))
	})
}

// holdsByAcquired returns the holds sorted by acquisition time, ties by ID.
func (h *History) holdsByAcquired() []HoldRecord {
	s := slices.Clone(h.Holds)
	slices.SortStableFunc(s, func(a, b HoldRecord) int {
		return cmp.Or(cmp.Compare(a.Acquired, b.Acquired), cmp.Compare(a.ID, b.ID))
	})
	return s
}

// Report judges everything recorded so far (see Oracle for the definitions).
// It may be called while recording continues.
func (o *Oracle) Report() Report {
	h := o.History()
	return h.report()
}

// report computes a Report from an analysed History.
func (h *History) report() Report {
	r := Report{
		Acquisitions:      len(h.Holds),
		FailedAcquires:    len(h.Failures),
		ViolationList:     slices.Clone(h.Violations),
		Violations:        len(h.Violations),
		Writes:            len(h.Writes),
		Resources:         map[string]ResourceStats{},
		Faults:            len(h.Faults),
		Notes:             len(h.Notes),
		UnknownHoldEvents: h.UnknownHoldEvents,
		Span:              h.End,
		SpanMS:            h.EndMS,
	}
	if r.ViolationList == nil {
		r.ViolationList = []Violation{}
	}
	for _, v := range h.Violations {
		if v.Believed {
			r.BelievedViolations++
		}
	}

	ok := make([]time.Duration, 0, len(h.Holds))
	all := make([]time.Duration, 0, len(h.Holds)+len(h.Failures))
	for _, x := range h.Holds {
		r.Attempts += x.Attempts
		if x.HasRelease {
			r.Releases++
		}
		if x.Extensions > 0 {
			r.ExtendedHolds++
		}
		ok = append(ok, x.Latency)
	}
	all = append(all, ok...)
	for _, f := range h.Failures {
		r.Attempts += f.Attempts
		all = append(all, f.Latency)
		if r.FailureReasons == nil {
			r.FailureReasons = map[string]int{}
		}
		r.FailureReasons[f.Reason]++
	}
	r.AcquireP50, r.AcquireP99, r.AcquireMax = latencyPercentiles(ok)
	r.CallP50, r.CallP99, r.CallMax = latencyPercentiles(all)
	r.AcquireP50MS, r.AcquireP99MS, r.AcquireMaxMS = durMS(r.AcquireP50), durMS(r.AcquireP99), durMS(r.AcquireMax)
	r.CallP50MS, r.CallP99MS, r.CallMaxMS = durMS(r.CallP50), durMS(r.CallP99), durMS(r.CallMax)

	for _, w := range h.Writes {
		s := r.Resources[w.Resource]
		s.Writes++
		if w.Accepted {
			s.Accepted++
		} else {
			s.Rejected++
		}
		if w.Stale {
			s.Stale++
		}
		r.Resources[w.Resource] = s
	}
	r.StaleWritesPlain = r.Resources[ResourcePlain].Stale
	r.StaleWritesFenced = r.Resources[ResourceFenced].Stale
	r.RejectedWritesFenced = r.Resources[ResourceFenced].Rejected

	r.TokenOrderViolations = h.tokenOrderViolations()
	return r
}

// tokenOrderViolations counts the holds out of token order (see Oracle).
func (h *History) tokenOrderViolations() int {
	n := 0
	var lastExclusive uint64 // the latest exclusive hold's token so far
	byStart := h.holdsByAcquired()
	for i, cur := range byStart {
		if i > 0 {
			prev := byStart[i-1].Token
			if cur.Shared {
				prev = lastExclusive
			}
			switch {
			case prev == 0 && cur.Token == 0 && !h.tokens:
			case cur.Shared && cur.Token < prev, !cur.Shared && cur.Token <= prev:
				n++
			}
		}
		if !cur.Shared {
			lastExclusive = cur.Token
		}
	}
	return n
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// samples: the smallest sample such that at least p% of the samples are <= it.
// It returns 0 for no samples; p <= 0 gives the minimum and p > 100 the
// maximum. samples is not modified.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return latencyRank(s, p)
}

// latencyRank is Percentile on already sorted, non-empty samples.
func latencyRank(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	rank := int(ceilTolerant(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// ceilTolerant is math.Ceil with a tolerance for floating-point noise (so that
// 0.99*100 counts as 99, not 100).
func ceilTolerant(x float64) float64 {
	i := float64(int64(x))
	if x-i > 1e-9 {
		return i + 1
	}
	return i
}

// latencyPercentiles returns p50, p99 and max of samples (all 0 if none).
func latencyPercentiles(samples []time.Duration) (p50, p99, maxv time.Duration) {
	if len(samples) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return latencyRank(s, 50), latencyRank(s, 99), s[len(s)-1]
}

// durMS converts d to float milliseconds.
func durMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sortedLaneIDs returns the keys of m in ascending order.
func sortedLaneIDs(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
