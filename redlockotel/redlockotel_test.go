package redlockotel_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockotel"
)

func keyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:8])
}

// node attributes of test node i (127.0.0.1:7001+i, database 0).
var nodeAttrs = []string{
	"db.namespace=0,redlock.node.outcome=%s,redlock.operation.name=%s,server.address=127.0.0.1,server.port=7001",
	"db.namespace=0,redlock.node.outcome=%s,redlock.operation.name=%s,server.address=127.0.0.1,server.port=7002",
	"db.namespace=0,redlock.node.outcome=%s,redlock.operation.name=%s,server.address=127.0.0.1,server.port=7003",
}

func outcomeKey(node int, outcome, op string) string {
	return "redlock.node.outcomes{" + fmt.Sprintf(nodeAttrs[node], outcome, op) + "}"
}

func TestObserver_AcquireExtendReleaseWithOneNodeDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 3, nil)
		h.nodes[0].Slow(5 * time.Millisecond)
		h.nodes[1].Slow(10 * time.Millisecond)
		h.nodes[2].Refuse()
		ctx, caller := h.tp.Tracer("test").Start(context.Background(), "caller")
		t0 := time.Now()

		// Acquire: the vote decides at 10 ms (node 0 at 5, node 1 at 10,
		// node 2 refused at once); the granting nodes' fencing counters
		// agree, so there is no write-back. Validity: 10 s − 10 ms − drift
		// (10 s × 0.01 + 2 ms) = 9.888 s. The token is a counter seeded
		// from the clock in µs: only its value on the span is checked.
		l, err := h.rl.Acquire(ctx, "job", 10*time.Second)
		require.NoError(t, err)
		token := strconv.FormatUint(l.Token(), 10)
		require.NotZero(t, l.Token())
		l, err = l.Extend(ctx, 10*time.Second) // 10 ms: 10 s − 10 ms − 102 ms = 9.888 s
		require.NoError(t, err)
		require.NoError(t, l.Release(ctx)) // 10 ms
		caller.End()

		assert.Equal(t, []string{
			"redlock.acquire.attempts {attempt}",
			"redlock.lock.validity s",
			"redlock.node.outcomes {outcome}",
			"redlock.nodes.granted {node}",
			"redlock.operation.duration s",
			"redlock.operations {operation}",
		}, h.instruments(t))
		want := map[string]string{
			"redlock.operations{redlock.operation.name=acquire}":         "1",
			"redlock.operations{redlock.operation.name=extend}":          "1",
			"redlock.operations{redlock.operation.name=release}":         "1",
			"redlock.operation.duration{redlock.operation.name=acquire}": "count=1 sum=0.01 [le0.01:1]",
			"redlock.operation.duration{redlock.operation.name=extend}":  "count=1 sum=0.01 [le0.01:1]",
			"redlock.operation.duration{redlock.operation.name=release}": "count=1 sum=0.01 [le0.01:1]",
			"redlock.acquire.attempts{}":                                 "count=1 sum=1 [le1:1]",
			"redlock.lock.validity{redlock.operation.name=acquire}":      "count=1 sum=9.888 [le10:1]",
			"redlock.lock.validity{redlock.operation.name=extend}":       "count=1 sum=9.888 [le10:1]",
			"redlock.nodes.granted{redlock.operation.name=acquire}":      "count=1 sum=2 [le2:1]",
			"redlock.nodes.granted{redlock.operation.name=extend}":       "count=1 sum=2 [le2:1]",
			"redlock.nodes.granted{redlock.operation.name=release}":      "count=1 sum=2 [le2:1]",
		}
		for _, op := range []string{"acquire", "extend", "release"} {
			want[outcomeKey(0, "granted", op)] = "1"
			want[outcomeKey(1, "granted", op)] = "1"
			want[outcomeKey(2, "unreachable", op)] = "1"
		}
		assert.Equal(t, want, h.metrics(t))

		failed := "[127.0.0.1:7003/0=unreachable]"
		assert.Equal(t, []span{
			{Name: "caller", Attrs: map[string]string{}, Status: "Unset", Dur: 30 * time.Millisecond},
			{
				Name: "redlock.acquire", Parent: "caller", Status: "Unset", Dur: 10 * time.Millisecond,
				Attrs: map[string]string{
					"redlock.key.hash": keyHash("job"), "redlock.acquire.attempts": "1", "redlock.quorum": "2",
					"redlock.nodes.granted": "2", "redlock.nodes.failed": failed, "redlock.fencing.token": token,
				},
				Events: []string{"redlock.attempt{redlock.attempt=1,redlock.lock.validity=9.888,redlock.nodes.failed=" + failed + ",redlock.nodes.granted=2,redlock.quorum=2}"},
			},
			{
				Name: "redlock.extend", Parent: "caller", Status: "Unset", Start: 10 * time.Millisecond, Dur: 10 * time.Millisecond,
				Attrs: map[string]string{
					"redlock.key.hash": keyHash("job"), "redlock.quorum": "2", "redlock.nodes.granted": "2",
					"redlock.nodes.failed": failed, "redlock.fencing.token": token,
				},
			},
			{
				Name: "redlock.release", Parent: "caller", Status: "Unset", Start: 20 * time.Millisecond, Dur: 10 * time.Millisecond,
				Attrs: map[string]string{
					"redlock.key.hash": keyHash("job"), "redlock.quorum": "2", "redlock.nodes.granted": "2",
					"redlock.nodes.failed": failed,
				},
			},
		}, h.ended(t0))
	})
}

func TestObserver_FailedAcquisitionKeyHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 3, nil)
		h.holdElsewhere(t, "job", time.Minute, 0, 1)
		h.nodes[1].Slow(5 * time.Millisecond)
		h.nodes[2].Slow(20 * time.Millisecond)
		t0 := time.Now()

		// Node 0 says taken at once, node 1 at 5 ms: the quorum is then
		// impossible, node 2 is still pending. The attempt's validity would
		// have been 10 s − 5 ms − 102 ms. Acquire returns once every node
		// call is over: node 2 grants at 20 ms and the late grant is undone
		// by a release that takes 20 ms more.
		_, err := h.rl.TryAcquire(context.Background(), "job", 10*time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		assert.Equal(t, 40*time.Millisecond, time.Since(t0))

		assert.Equal(t, map[string]string{
			"redlock.operations{error.type=not_acquired,redlock.operation.name=acquire}":         "1",
			"redlock.operation.duration{error.type=not_acquired,redlock.operation.name=acquire}": "count=1 sum=0.04 [le0.05:1]",
			"redlock.acquire.attempts{error.type=not_acquired}":                                  "count=1 sum=1 [le1:1]",
			"redlock.nodes.granted{redlock.operation.name=acquire}":                              "count=1 sum=0 [le0:1]",
			outcomeKey(0, "taken", "acquire"):                                                    "1",
			outcomeKey(1, "taken", "acquire"):                                                    "1",
			outcomeKey(2, "pending", "acquire"):                                                  "1",
		}, h.metrics(t))

		failed := "[127.0.0.1:7001/0=taken 127.0.0.1:7002/0=taken 127.0.0.1:7003/0=pending]"
		assert.Equal(t, []span{{
			Name: "redlock.acquire", Status: "Error: not_acquired", Dur: 40 * time.Millisecond,
			Attrs: map[string]string{
				"redlock.key.hash": keyHash("job"), "redlock.acquire.attempts": "1", "redlock.quorum": "2",
				"redlock.nodes.granted": "0", "redlock.nodes.failed": failed, "error.type": "not_acquired",
			},
			Events: []string{"redlock.attempt{error.type=not_acquired,redlock.attempt=1,redlock.lock.validity=9.893,redlock.nodes.failed=" + failed + ",redlock.nodes.granted=0,redlock.quorum=2}"},
		}}, h.ended(t0))
	})
}

func TestObserver_AcquireRetriesAreEventsOfOneSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 3, []redlockotel.Option{redlockotel.WithKeyAttribute(redlockotel.KeyPlain)})
		// Held on nodes 0 and 1 for 250 ms. A failed attempt is decided at
		// 5 ms (node 1's "taken"; node 2 still pending) and starts its
		// release without waiting for it; the retry waits 100 ms (the
		// release ends within it). Attempts start at 0, 105 and 210 ms and
		// fail; the one at 315 ms wins at 320 ms (the counters agree: no
		// write-back).
		h.holdElsewhere(t, "job", 250*time.Millisecond, 0, 1)
		h.nodes[1].Slow(5 * time.Millisecond)
		h.nodes[2].Slow(10 * time.Millisecond)
		t0 := time.Now()
		l, err := h.rl.Acquire(context.Background(), "job", 10*time.Second, redlock.WithRetry(redlock.LinearRetry(100*time.Millisecond, 0, 5)))
		require.NoError(t, err)
		require.Equal(t, 4, l.Attempts())

		got := h.metrics(t)
		assert.Equal(t, "count=1 sum=4 [le4:1]", got["redlock.acquire.attempts{}"])
		assert.Equal(t, "count=1 sum=0.32 [le0.5:1]", got["redlock.operation.duration{redlock.operation.name=acquire}"])
		assert.Equal(t, "count=4 sum=2 [le0:3 le2:1]", got["redlock.nodes.granted{redlock.operation.name=acquire}"])
		assert.Equal(t, "4", got[outcomeKey(2, "pending", "acquire")])
		assert.Equal(t, "3", got[outcomeKey(0, "taken", "acquire")])
		assert.Equal(t, "1", got[outcomeKey(0, "granted", "acquire")])

		spans := h.ended(t0)
		require.Len(t, spans, 1)
		assert.Equal(t, "job", spans[0].Attrs["redlock.key"])
		assert.NotContains(t, spans[0].Attrs, "redlock.key.hash")
		assert.Equal(t, "4", spans[0].Attrs["redlock.acquire.attempts"])
		require.Len(t, spans[0].Events, 4)
		for i, e := range spans[0].Events[:3] {
			assert.Contains(t, e, "error.type=not_acquired,redlock.attempt="+string(rune('1'+i)), "attempt %d", i+1)
		}
		assert.Contains(t, spans[0].Events[3], "redlock.attempt=4,")
		assert.NotContains(t, spans[0].Events[3], "error.type")
		require.NoError(t, l.Release(context.Background()))
	})
}

// An Acquire that waits an outage out and then takes the lock: its span
// gets an outage event when the wait starts and one when it ends, between
// its attempt events, and no metric is recorded for the outage itself (the
// attempts count the nodes' outcomes).
func TestObserver_OutageIsAnEventOfTheAcquireSpan(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 3, nil)
		h.nodes[0].Slow(time.Hour) // no answer within the per-node timeout
		h.nodes[1].Slow(time.Hour)
		go func() {
			time.Sleep(time.Second)
			h.nodes[1].Slow(0)
		}()
		t0 := time.Now()
		l, err := h.rl.Acquire(context.Background(), "job", 10*time.Second)
		require.NoError(t, err)
		spans := h.ended(t0)
		require.Len(t, spans, 1)
		var outage []string
		for _, e := range spans[0].Events {
			if strings.HasPrefix(e, "redlock.outage{") {
				outage = append(outage, e)
			}
		}
		assert.Equal(t, []string{"redlock.outage{redlock.outage.over=false}", "redlock.outage{redlock.outage.over=true}"}, outage)
		assert.True(t, strings.HasPrefix(spans[0].Events[0], "redlock.attempt{"), "the first attempt comes first")
		for k := range h.metrics(t) {
			assert.NotContains(t, k, "outage", "metric %s", k)
		}
		require.NoError(t, l.Release(context.Background()))
	})
}

func TestObserver_LostLeaseInDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, 3, []redlockotel.Option{redlockotel.WithKeyAttribute(redlockotel.KeyOff)})
		h.nodes[1].Slow(5 * time.Millisecond)
		h.nodes[2].Slow(10 * time.Millisecond)
		t0 := time.Now()

		// TTL 3 s: the Lease extends every second, counted from the start of
		// the acquisition. Nodes 0 and 1 go down at 510 ms, so the extension
		// at 1 s fails at once and the lease is lost; the release then
		// returns at once: with nodes 0 and 1 unreachable no majority can
		// answer, so it does not wait for node 2 (10 ms), whose delete ends
		// in the background.
		err := h.rl.Do(context.Background(), "job", 3*time.Second, func(ctx context.Context, _ *redlock.Lease) error {
			time.Sleep(500 * time.Millisecond)
			h.nodes[0].Refuse()
			h.nodes[1].Refuse()
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 1000*time.Millisecond, time.Since(t0))

		got := h.metrics(t)
		want := map[string]string{
			"redlock.operations{redlock.operation.name=acquire}":                              "1",
			"redlock.operations{error.type=no_quorum,redlock.operation.name=extend}":          "1",
			"redlock.operations{error.type=no_quorum,redlock.operation.name=release}":         "1",
			"redlock.operations{error.type=lock_lost,redlock.operation.name=do}":              "1",
			"redlock.operation.duration{redlock.operation.name=acquire}":                      "count=1 sum=0.005 [le0.005:1]",
			"redlock.operation.duration{error.type=no_quorum,redlock.operation.name=extend}":  "count=1 sum=0 [le0.005:1]",
			"redlock.operation.duration{error.type=no_quorum,redlock.operation.name=release}": "count=1 sum=0 [le0.005:1]",
			"redlock.operation.duration{error.type=lock_lost,redlock.operation.name=do}":      "count=1 sum=1 [le1:1]",
			"redlock.acquire.attempts{}":                                                      "count=1 sum=1 [le1:1]",
			"redlock.leases.lost{error.type=lock_lost}":                                       "1",
			"redlock.lock.validity{redlock.operation.name=acquire}":                           "count=1 sum=2.963 [le5:1]",
			"redlock.nodes.granted{redlock.operation.name=acquire}":                           "count=1 sum=2 [le2:1]",
			"redlock.nodes.granted{redlock.operation.name=extend}":                            "count=1 sum=0 [le0:1]",
			"redlock.nodes.granted{redlock.operation.name=release}":                           "count=1 sum=0 [le0:1]",
			outcomeKey(0, "granted", "acquire"):                                               "1",
			outcomeKey(1, "granted", "acquire"):                                               "1",
			outcomeKey(2, "pending", "acquire"):                                               "1",
			outcomeKey(0, "unreachable", "extend"):                                            "1",
			outcomeKey(1, "unreachable", "extend"):                                            "1",
			outcomeKey(2, "pending", "extend"):                                                "1",
			outcomeKey(0, "unreachable", "release"):                                           "1",
			outcomeKey(1, "unreachable", "release"):                                           "1",
			outcomeKey(2, "pending", "release"):                                               "1",
		}
		assert.Equal(t, want, got)

		unreachable := "127.0.0.1:7001/0=unreachable 127.0.0.1:7002/0=unreachable"
		ended := h.ended(t0)
		// The token is a counter seeded from the clock in µs: take it from
		// the acquire span, after checking that it is one.
		require.Len(t, ended, 4)
		token := ended[1].Attrs["redlock.fencing.token"]
		n, err := strconv.ParseUint(token, 10, 64)
		require.NoError(t, err, "fencing token attribute %q", token)
		require.NotZero(t, n)
		assert.Equal(t, []span{
			{
				Name: "redlock.do", Status: "Error: lock_lost", Dur: time.Second,
				Attrs:  map[string]string{"error.type": "lock_lost"},
				Events: []string{"redlock.lease.lost{error.type=lock_lost}"},
			},
			{
				Name: "redlock.acquire", Parent: "redlock.do", Status: "Unset", Dur: 5 * time.Millisecond,
				Attrs: map[string]string{
					"redlock.acquire.attempts": "1", "redlock.quorum": "2", "redlock.nodes.granted": "2",
					"redlock.nodes.failed": "[127.0.0.1:7003/0=pending]", "redlock.fencing.token": token,
				},
				Events: []string{"redlock.attempt{redlock.attempt=1,redlock.lock.validity=2.963,redlock.nodes.failed=[127.0.0.1:7003/0=pending],redlock.nodes.granted=2,redlock.quorum=2}"},
			},
			{
				Name: "redlock.extend", Parent: "redlock.do", Status: "Error: no_quorum", Start: time.Second,
				Attrs: map[string]string{
					"redlock.quorum": "2", "redlock.nodes.granted": "0", "error.type": "no_quorum",
					"redlock.nodes.failed": "[" + unreachable + " 127.0.0.1:7003/0=pending]",
				},
			},
			{
				Name: "redlock.release", Parent: "redlock.do", Status: "Error: no_quorum", Start: time.Second,
				Attrs: map[string]string{
					"redlock.quorum": "2", "redlock.nodes.granted": "0", "error.type": "no_quorum",
					"redlock.nodes.failed": "[" + unreachable + " 127.0.0.1:7003/0=pending]",
				},
			},
		}, ended)
	})
}

func TestObserver_NeverRecordsOwnerOrKeyWhenOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const key = "client-42-report"
		h := newHarness(t, 3, []redlockotel.Option{redlockotel.WithKeyAttribute(redlockotel.KeyOff)})
		h.holdElsewhere(t, "other", time.Minute, 0, 1, 2)
		l, err := h.rl.Acquire(context.Background(), key, time.Second)
		require.NoError(t, err)
		_, err = h.rl.TryAcquire(context.Background(), "other", time.Second)
		require.Error(t, err)
		require.NoError(t, l.Release(context.Background()))

		for _, s := range h.ended(time.Now()) {
			for k, v := range s.Attrs {
				for _, secret := range []string{key, "other", l.Owner(), "someone-else"} {
					assert.NotContains(t, v, secret, "%s attribute %s", s.Name, k)
				}
			}
			for _, e := range s.Events {
				assert.NotContains(t, e, key)
				assert.NotContains(t, e, l.Owner())
			}
			assert.NotContains(t, s.Status, key)
		}
		for k := range h.metrics(t) {
			assert.NotContains(t, k, key)
		}
	})
}

func TestNew_RejectsBadOptions(t *testing.T) {
	for name, opt := range map[string]redlockotel.Option{
		"nil option":          nil,
		"nil meter provider":  redlockotel.WithMeterProvider(nil),
		"nil tracer provider": redlockotel.WithTracerProvider(nil),
		"unknown key mode":    redlockotel.WithKeyAttribute(redlockotel.KeyMode(7)),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := redlockotel.New(opt)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		})
	}
}

func TestErrorType(t *testing.T) {
	qe := &redlock.QuorumError{Op: "acquire", Err: redlock.ErrNotAcquired, Cause: context.DeadlineExceeded}
	for want, err := range map[string]error{
		"":                  nil,
		"lock_lost":         errors.Join(redlock.ErrLockLost, qe),
		"hold_limit":        redlock.ErrHoldLimit,
		"not_acquired":      qe,
		"not_held":          redlock.ErrNotHeld,
		"no_quorum":         redlock.ErrNoQuorum,
		"invalid_argument":  redlock.ErrInvalidArgument,
		"closed":            redlock.ErrClosed,
		"canceled":          context.Canceled,
		"deadline_exceeded": context.DeadlineExceeded,
		"_OTHER":            errors.New("fn failed"),
	} {
		assert.Equal(t, want, redlockotel.ErrorType(err), "%v", err)
	}
}

// The package documentation promises that passwords are never recorded: the
// nodes are dialed from URLs with passwords (one of them wrong, so that
// node's failures are recorded too), and no span or data point carries a
// password or user name, while every node's port is there.
func TestObserver_NeverRecordsPasswords(t *testing.T) {
	const password, wrong, user = "pw-hunter2-right", "pw-hunter2-wrong", "lockuser"
	reader, rec := sdkmetric.NewManualReader(), tracetest.NewSpanRecorder()
	obs, err := redlockotel.New(
		redlockotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		redlockotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))),
		redlockotel.WithKeyAttribute(redlockotel.KeyPlain))
	require.NoError(t, err)
	var urls, ports []string
	for i := range 3 {
		m := miniredis.NewMiniRedis()
		m.RequireUserAuth(user, password)
		require.NoError(t, m.Start())
		t.Cleanup(m.Close)
		pw := password
		if i == 2 {
			pw = wrong
		}
		urls = append(urls, "redis://"+user+":"+pw+"@"+m.Addr()+"/0")
		ports = append(ports, m.Port())
	}
	c, err := redlock.Dial(urls, redlock.WithObserver(obs))
	require.NoError(t, err)
	defer c.Close()

	ctx := context.Background()
	l, err := c.Acquire(ctx, "k", 10*time.Second)
	require.NoError(t, err)
	_, err = c.TryAcquire(ctx, "k", 10*time.Second)
	require.Error(t, err)
	_, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Do(ctx, "d", 10*time.Second, func(context.Context, *redlock.Lease) error { return nil }))

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	recorded := fmt.Sprintf("%+v\n", rm)
	for _, s := range rec.Ended() {
		recorded += fmt.Sprintf("%s %v %+v %+v %v\n", s.Name(), s.Attributes(), s.Events(), s.Status(), s.Links())
	}
	for _, p := range ports {
		require.Truef(t, strings.Contains(recorded, p), "node port %s is recorded", p)
	}
	for _, secret := range []string{password, wrong, user} {
		assert.Falsef(t, strings.Contains(recorded, secret), "a span or data point carries %q", secret)
	}
}
