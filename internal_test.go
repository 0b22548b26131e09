package redlock

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/d3b93e30/redlock/internal/nodecall"
)

func TestDefaultNodeTimeout(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		10 * time.Second:       100 * time.Millisecond, // 1%, and the floor
		30 * time.Second:       300 * time.Millisecond,
		5 * time.Minute:        time.Second,            // capped at 1 s
		2 * time.Second:        100 * time.Millisecond, // floor
		100 * time.Millisecond: 100 * time.Millisecond, // never below the floor: checkTTL rejects the ttl
	} {
		assert.Equal(t, want, defaultNodeTimeout(ttl), "ttl %v", ttl)
	}
	assert.Error(t, checkTTL(100*time.Millisecond, DefaultDriftFactor, defaultNodeTimeout(100*time.Millisecond)))
}

// minTTL is the exact boundary of checkTTL: it passes, one millisecond less
// does not, for drift factors and per-node timeouts across their range.
func TestMinTTL_IsTheBoundary(t *testing.T) {
	for _, f := range []float64{0, 0.001, 0.01, 0.1, 0.333, 0.5, 0.9, 0.99} {
		for _, timeout := range []time.Duration{time.Microsecond, time.Millisecond, 1500 * time.Microsecond, 20 * time.Millisecond, 99 * time.Millisecond, time.Second, time.Minute} {
			m, ok := minTTL(f, timeout)
			if !assert.True(t, ok) {
				continue
			}
			assert.NoError(t, checkTTL(m, f, timeout), "factor %g, timeout %v: minTTL %v passes", f, timeout, m)
			if m > time.Millisecond {
				err := checkTTL(m-time.Millisecond, f, timeout)
				if assert.Error(t, err, "factor %g, timeout %v: %v fails", f, timeout, m-time.Millisecond) {
					assert.Contains(t, err.Error(), "smallest usable ttl with this drift factor and per-node timeout is "+m.String())
				}
			}
		}
	}
	_, ok := minTTL(1-1e-18, time.Second)
	assert.False(t, ok, "no TTL fits when the drift factor rounds to 1")
	for _, timeout := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Millisecond, 1 << 62} {
		m, ok := minTTL(0.01, timeout)
		assert.False(t, ok, "timeout %v: no TTL fits, got %v", timeout, m)
	}
}

func TestFenceKeySharesHashSlot(t *testing.T) {
	for name, want := range map[string]string{
		"report":              "{report}:fence",
		"lock:report:{42}":    "lock:report:{42}:fence", // keeps the user's hash tag
		"lock:{}":             "{lock:{}}:fence",        // an empty tag is no tag
		"lock:{unterminated":  "{lock:{unterminated}:fence",
		"lock:report:client7": "{lock:report:client7}:fence",
	} {
		assert.Equal(t, want, fenceKey(name), name)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    reply
		want Outcome
	}{
		{"applied", reply{Code: codeApplied}, OutcomeGranted},
		{"taken", reply{Code: codeTaken}, OutcomeTaken},
		{"not held", reply{Code: codeNotHeld}, OutcomeNotHeld},
		{"handed off", reply{Code: codeHandedOff}, OutcomeGranted},
		{"quarantined", reply{Code: codeQuarantined}, OutcomeQuarantined},
		{"canceled", reply{Err: context.Canceled}, OutcomeCanceled},
		{"deadline", reply{Err: context.DeadlineExceeded}, OutcomeTimedOut},
		{"net timeout", reply{Err: &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}}, OutcomeTimedOut},
		{"refused", reply{Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, OutcomeUnreachable},
		{"eof", reply{Err: io.EOF}, OutcomeUnreachable},
		{"client closed", reply{Err: redis.ErrClosed}, OutcomeUnreachable},
		{"redis error reply", reply{Err: redisErr("NOSCRIPT No matching script")}, OutcomeError},
		{"wrapped redis error reply", reply{Err: errors.Join(errors.New("x"), redisErr("OOM"))}, OutcomeError},
	} {
		assert.Equal(t, tc.want, classify(tc.r), tc.name)
	}
}

// redisErr is an error reply as go-redis returns it (it implements
// redis.Error).
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

var _ redis.Error = redisErr("")

// A key whose braces form no hash tag cannot have its counter and epoch in
// its own cluster slot: it is refused rather than split across slots.
func TestCheckKeyName(t *testing.T) {
	for _, ok := range []string{"report", "lock:report:{42}", "{a}b}", "x{y}z"} {
		assert.NoError(t, checkKeyName(ok), ok)
	}
	for _, bad := range []string{"a}b", "lock:{}", "lock:{unterminated", "}{"} {
		assert.ErrorIs(t, checkKeyName(bad), ErrInvalidArgument, bad)
	}
}

// observerFunc is an Observer from a function.
type observerFunc func(Event)

func (f observerFunc) Observe(ev Event) { f(ev) }

// An Event is built only when an Observer is set or the logger would log
// it; with the defaults (no Observer, a discarding logger) never.
func TestWantsEvent(t *testing.T) {
	ctx := context.Background()
	ops := []struct {
		op Op
		ok bool
	}{{OpAcquire, true}, {OpAcquire, false}, {OpExtend, true}, {OpExtend, false}, {OpRelease, true}, {OpRelease, false}}
	info := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))
	debug := slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	for _, o := range ops {
		cfg := defaultConfig()
		assert.False(t, cfg.wantsEvent(ctx, o.op, o.ok), "defaults: %s ok=%v", o.op, o.ok)
		cfg.logger = info // warn-level Events only: failed extensions and releases
		assert.Equal(t, !o.ok && o.op != OpAcquire, cfg.wantsEvent(ctx, o.op, o.ok), "info logger: %s ok=%v", o.op, o.ok)
		cfg.logger = debug
		assert.True(t, cfg.wantsEvent(ctx, o.op, o.ok), "debug logger: %s ok=%v", o.op, o.ok)
		cfg = defaultConfig()
		cfg.observer = observerFunc(func(Event) {})
		assert.True(t, cfg.wantsEvent(ctx, o.op, o.ok), "observer: %s ok=%v", o.op, o.ok)
	}
}

// A vote whose node calls have all finished before it counts them reports
// what they answered, not a timeout: the last call to finish ends the
// vote's context, so expired is ready beside the replies, and a vote that
// took that for the per-node timeout reported a node whose call was never
// sent (shed) as timed out. (TestAcquire_SlowNodeBacklogIsBounded
// failed about once in a hundred runs on this.) Each round is a coin toss
// for the select, so fifty rounds miss the fault with odds of 2^-50.
func TestVote_FinishedCallsDecideItNotTheClock(t *testing.T) {
	c := voteClient("a", "b", "c")
	for range 50 {
		b := c.startVote(context.Background(), decideAtQuorum, c.quorum, nodecall.Vote{Timeout: time.Minute, Op: func(_ context.Context, n *node) reply {
			if n.Idx == 2 {
				return reply{Err: errShed, Shed: true}
			}
			return reply{Code: codeApplied}
		}})
		<-b.Done() // every call has finished and queued its reply
		b.Count(context.Background())
		tl := &b.tally
		assert.Equal(t, 2, tl.granted)
		var got []Outcome
		for _, r := range tl.results {
			got = append(got, r.Outcome)
		}
		if !assert.Equal(t, []Outcome{OutcomeGranted, OutcomeGranted, OutcomePending}, got) {
			return
		}
		assert.NoError(t, tl.results[2].Err, "a shed call is not the node's error")
	}
}

// When the per-node timeout does decide a vote, the nodes that did not
// answer are timed out, but a node whose call was never sent (shed: the
// client's own backlog) stays pending: it is no fault of the node's.
func TestVote_TimeoutLeavesShedCallsPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := voteClient("a", "b", "c")
		start := time.Now()
		tl, done := c.voteQuorum(context.Background(), 100*time.Millisecond, func(ctx context.Context, n *node) reply {
			switch n.Idx {
			case 0:
				return reply{Code: codeApplied}
			case 1:
				<-ctx.Done() // no answer within the per-node timeout
				return reply{Err: ctx.Err()}
			default:
				return reply{Err: errShed, Shed: true}
			}
		}, nil)
		<-done
		assert.Equal(t, 100*time.Millisecond, time.Since(start), "decided by the clock")
		var got []Outcome
		for _, r := range tl.results {
			got = append(got, r.Outcome)
		}
		assert.Equal(t, []Outcome{OutcomeGranted, OutcomeTimedOut, OutcomePending}, got)
		assert.NoError(t, tl.results[2].Err)
	})
}

// voteClient is a Client over nodes named names that no call reaches: the
// tests' node calls answer themselves.
func voteClient(names ...string) *Client {
	c := &Client{quorum: len(names)/2 + 1}
	for i, name := range names {
		c.nodes = append(c.nodes, &node{Idx: i, Name: name})
	}
	c.eng.Nodes, c.eng.Quorum = c.nodes, c.quorum
	c.eng.Init()
	return c
}

// An outage (a run of attempts that no majority answered) starts at an
// attempt in which so many nodes failed that the rest are fewer than a
// quorum, and ends only at one that a majority answered: an attempt whose
// other nodes were left pending or cut short by the caller does neither.
func TestOutage_StartsWithoutAQuorumAndEndsWhenAMajorityAnswers(t *testing.T) {
	attempt := func(outcomes ...Outcome) *QuorumError {
		qe := &QuorumError{Err: ErrNotAcquired, Quorum: len(outcomes)/2 + 1}
		for _, o := range outcomes {
			qe.Nodes = append(qe.Nodes, NodeResult{Outcome: o})
		}
		return qe
	}
	o := &outage{cfg: config{outageLimit: time.Hour}}
	start := time.Now()
	for i, step := range []struct {
		qe    *QuorumError
		since time.Time // zero: no outage
	}{
		{attempt(OutcomeGranted, OutcomePending, OutcomeCanceled), time.Time{}},
		{attempt(OutcomeUnreachable, OutcomeTimedOut, OutcomeTaken), start.Add(1)},
		{attempt(OutcomeError, OutcomeUnreachable, OutcomePending), start.Add(1)},
		{attempt(OutcomeGranted, OutcomePending, OutcomePending), start.Add(1)},
		{attempt(OutcomeTaken, OutcomeUnreachable, OutcomeCanceled), start.Add(1)},
		{attempt(OutcomeQuarantined, OutcomeNotHeld, OutcomeTimedOut), time.Time{}},
	} {
		assert.NoError(t, o.record(start.Add(time.Duration(i)), step.qe), "attempt %d", i)
		assert.Equal(t, step.since, o.since, "attempt %d: %v", i, outcomesOf(step.qe))
	}
}

func outcomesOf(qe *QuorumError) []Outcome {
	var out []Outcome
	for _, n := range qe.Nodes {
		out = append(out, n.Outcome)
	}
	return out
}
