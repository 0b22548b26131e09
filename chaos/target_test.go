package chaos

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// fakeTarget is a lock service in memory for RunTarget: one lock, tokens
// counting up, and faults that are only recorded, except that
// ActionPartition on the holder's node tells the holder its lock may be
// lost (closes its Done) without freeing the lock.
type fakeTarget struct {
	nodes   int
	granted int // the node every acquisition names as the one that granted it

	mu      sync.Mutex
	held    *fakeHeld
	token   uint64
	calls   []string // "fault kill 1", "undo pause 0", "pause-client 0 true", "close"
	changed chan struct{}
}

func newFakeTarget(nodes, granted int) *fakeTarget {
	return &fakeTarget{nodes: nodes, granted: granted, changed: make(chan struct{})}
}

func (t *fakeTarget) record(call string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, call)
}

func (t *fakeTarget) Nodes() int               { return t.nodes }
func (t *fakeTarget) Locker(client int) Locker { return t }
func (t *fakeTarget) Close() error             { t.record("close"); return nil }
func (t *fakeTarget) PauseClient(client int, on bool) {
	t.record(fmtCall("pause-client", client, on))
}

func (t *fakeTarget) Fault(_ context.Context, f Fault, node int) (string, error) {
	if f.Action == ActionRestartAmnesia {
		return "", ErrUnsupported
	}
	t.record(fmtCall("fault "+string(f.Action), node, nil))
	if f.Action == ActionPartition && node == t.granted {
		t.mu.Lock()
		if t.held != nil {
			t.held.lose()
		}
		t.mu.Unlock()
	}
	return "fake " + string(f.Action), nil
}

func (t *fakeTarget) Undo(_ context.Context, f Fault, node int) error {
	t.record(fmtCall("undo "+string(f.Action), node, nil))
	return nil
}

func (t *fakeTarget) Acquire(ctx context.Context, _ string, _ time.Duration) (Held, error) {
	for {
		t.mu.Lock()
		if t.held == nil {
			t.token++
			h := &fakeHeld{t: t, token: t.token, done: make(chan struct{})}
			t.held = h
			t.mu.Unlock()
			return h, nil
		}
		changed := t.changed
		t.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
	}
}

type fakeHeld struct {
	t        *fakeTarget
	token    uint64
	done     chan struct{}
	lostOnce sync.Once
}

func (h *fakeHeld) Token() uint64         { return h.token }
func (h *fakeHeld) Done() <-chan struct{} { return h.done }
func (h *fakeHeld) Granted() []int        { return []int{h.t.granted} }
func (h *fakeHeld) lose()                 { h.lostOnce.Do(func() { close(h.done) }) }

func (h *fakeHeld) Release(context.Context) error {
	h.t.mu.Lock()
	defer h.t.mu.Unlock()
	if h.t.held == h {
		h.t.held = nil
		close(h.t.changed)
		h.t.changed = make(chan struct{})
	}
	return nil
}

func fmtCall(what string, n int, on any) string {
	if on == nil {
		return what + " " + string(rune('0'+n))
	}
	return what + " " + string(rune('0'+n)) + " " + map[bool]string{true: "on", false: "off"}[on.(bool)]
}

func (t *fakeTarget) callList() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.calls...)
}

// RunTarget drives a Locker's workload and applies faults through the
// Target: a fault triggered by A's acquisition picks the node that granted
// it (Held.Granted), is undone after For with its band closed; A's belief
// ends when its Done closes (the oracle's hold ends then, with a note); B,
// started by A's acquisition, takes the lock after A released it.
func TestRunTarget_TriggeredFaultAndLostLock(t *testing.T) {
	target := newFakeTarget(3, 2)
	afterA := &Trigger{Client: 0, Nth: 1}
	s := Scenario{Name: "fake", Expect: Safe, Availability: Available, Duration: 400 * time.Millisecond,
		Workload: Workload{Clients: 2, TTL: time.Second, Hold: 10 * time.Millisecond, WriteEvery: 5 * time.Millisecond, MaxAcquires: 1,
			HoldOf: map[int]time.Duration{0: 300 * time.Millisecond, 1: 300 * time.Millisecond}, StartOn: map[int]Trigger{1: *afterA}},
		Faults: []Fault{{On: afterA, Nodes: NodeSet{Pick: PickGranted}, Action: ActionPartition, For: 50 * time.Millisecond}},
	}
	res, err := RunTarget(context.Background(), func(context.Context, Workload) (Target, error) { return target, nil }, s, 1, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, Safe, res.Observed, "notes: %v", res.Notes)
	assert.Equal(t, 2, res.Acquisitions)
	assert.Zero(t, res.Violations)
	assert.Equal(t, "fencing.Register (in process)", res.FencedStore)
	assert.Equal(t, []string{"fault partition 2", "undo partition 2", "close"}, target.callList())

	h := res.Histories[0].h
	require.Len(t, h.Holds, 2)
	a, b := h.Holds[0], h.Holds[1]
	require.Equal(t, 0, a.Client)
	var lost []oracle.NoteRecord
	for _, n := range h.Notes {
		if n.Text == "client 0 learns its lock may be lost" {
			lost = append(lost, n)
		}
	}
	require.Len(t, lost, 1, "notes: %+v", h.Notes)
	assert.Equal(t, lost[0].At, a.BelievedEnd, "A's belief ends when its Done closes")
	assert.Less(t, a.BelievedEnd, a.Acquired+300*time.Millisecond, "not at the end of its 300 ms hold")
	assert.Equal(t, []uint64{1, 2}, []uint64{a.Token, b.Token})
	assert.GreaterOrEqual(t, b.Acquired, a.BelievedEnd)
	require.Len(t, h.Faults, 1)
	f := h.Faults[0]
	assert.Equal(t, 2, f.Node)
	assert.Equal(t, "fake partition", f.What)
	assert.GreaterOrEqual(t, f.To-f.From, 50*time.Millisecond, "undone after For")
	assert.Less(t, f.To, b.BelievedEnd, "closed when undone, not at the trial's end")
}

// A Workload.Pause holds the paused client's traffic (PauseClient on, then
// off), and ActionPause is a band of its Amount, undone after it. A fault
// the target cannot produce makes the result Skipped.
func TestRunTarget_PausesAndUnsupported(t *testing.T) {
	target := newFakeTarget(3, 0)
	s := Scenario{Name: "fake-pause", Expect: Safe, Duration: 300 * time.Millisecond,
		Workload: Workload{Clients: 1, TTL: time.Second, Hold: 5 * time.Millisecond,
			Pause: &Pause{Client: 0, Nth: 1, Length: 20 * time.Millisecond}},
		Faults: []Fault{{At: 100 * time.Millisecond, Nodes: NodeSet{Pick: PickFixed, Nodes: []int{1}}, Action: ActionPause, Amount: 30 * time.Millisecond}},
	}
	newTarget := func(context.Context, Workload) (Target, error) { return target, nil }
	res, err := RunTarget(context.Background(), newTarget, s, 1, 1, nil)
	require.NoError(t, err)
	assert.Equal(t, Safe, res.Observed, "notes: %v", res.Notes)
	assert.Equal(t, []string{"pause-client 0 on", "pause-client 0 off", "fault pause 1", "undo pause 1", "close"}, target.callList())
	h := res.Histories[0].h
	require.Len(t, h.Faults, 1)
	assert.Equal(t, 30*time.Millisecond, h.Faults[0].To-h.Faults[0].From)

	s.Faults = []Fault{{Nodes: NodeSet{Pick: PickFixed, Nodes: []int{0}}, Action: ActionRestartAmnesia}}
	res, err = RunTarget(context.Background(), func(context.Context, Workload) (Target, error) { return newFakeTarget(3, 0), nil }, s, 1, 1, nil)
	require.NoError(t, err)
	assert.NotEmpty(t, res.Skipped)
}

// Settings only a Cluster's Redlock clients have are refused, and so is a
// Target that cannot start (a harness error).
func TestRunTarget_RefusesRedlockOnlySettings(t *testing.T) {
	newTarget := func(context.Context, Workload) (Target, error) { return newFakeTarget(3, 0), nil }
	for name, s := range map[string]Scenario{
		"modes":         {Name: "m", Workload: Workload{Clients: 1, Modes: []Mode{ModeDo}}},
		"extend":        {Name: "e", Workload: Workload{Clients: 1, Extend: true}},
		"permits":       {Name: "p", Workload: Workload{Clients: 1, Permits: 2}},
		"keys released": {Name: "k", Workload: Workload{Clients: 1}, KeysReleased: true},
		"no clients":    {Name: "c"},
	} {
		_, err := RunTarget(context.Background(), newTarget, s, 1, 1, nil)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
	}
	boom := errors.New("cluster did not start")
	_, err := RunTarget(context.Background(), func(context.Context, Workload) (Target, error) { return nil, boom },
		Scenario{Name: "x", Workload: Workload{Clients: 1}, Duration: time.Millisecond}, 1, 1, nil)
	assert.ErrorIs(t, err, boom)
}

// A lock acquired before NoneBefore (while the majority is still cut off)
// makes the trial broken; one acquired after it does not.
func TestJudge_NoneBefore(t *testing.T) {
	s := Scenario{Name: "x", Expect: Safe, NoneBefore: time.Second}
	early := trialResult{history: oracle.History{Holds: []oracle.HoldRecord{{Client: 0, Acquired: s.NoneBefore - time.Millisecond}}}}
	late := trialResult{history: oracle.History{Holds: []oracle.HoldRecord{{Client: 0, Acquired: s.NoneBefore + time.Millisecond}}}}
	v, notes, _ := judge(s, oracle.Report{Acquisitions: 1}, early)
	assert.Equal(t, Broken, v)
	assert.NotEmpty(t, notes)
	v, _, _ = judge(s, oracle.Report{Acquisitions: 1}, late)
	assert.Equal(t, Safe, v)
}
