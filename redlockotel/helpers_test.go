package redlockotel_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockotel"
)

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // refused dials are expected
	os.Exit(m.Run())
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// The tests run in testing/synctest bubbles: in-process miniredis nodes
// reached over net.Pipe, whose TTLs follow the bubble's fake clock. Nothing
// takes time unless a node is told to delay its replies, so durations and
// validity times are exact.

// testNode is one in-memory Redis master.
type testNode struct {
	m       *miniredis.Miniredis
	rc      *redis.Client
	refused atomic.Bool
	mu      sync.Mutex
	delay   time.Duration // before each script call
}

// newTestNode starts node i, named 127.0.0.1:7001+i (never dialed).
func newTestNode(t *testing.T, i int) *testNode {
	t.Helper()
	n := &testNode{m: miniredis.NewMiniRedis()}
	n.m.ClockTTL(true)
	conn, err := n.m.Dial() // starts the server, which the hook needs
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	n.m.Server().SetPreHook(func(_ *server.Peer, cmd string, _ ...string) bool {
		n.mu.Lock()
		d := n.delay
		n.mu.Unlock()
		if d > 0 && (cmd == "EVALSHA" || cmd == "EVAL") {
			time.Sleep(d)
		}
		return false
	})
	n.rc = redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("127.0.0.1:%d", 7001+i),
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			if n.refused.Load() {
				return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
			}
			return n.m.Dial()
		},
		MaxRetries: -1, DialerRetries: 1, ContextTimeoutEnabled: true, Protocol: 2, DisableIdentity: true,
	})
	t.Cleanup(func() {
		_ = n.rc.Close()
		n.m.Close()
	})
	return n
}

// Slow delays every script call the node receives by d.
func (n *testNode) Slow(d time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.delay = d
}

// Refuse makes the node unreachable.
func (n *testNode) Refuse() {
	n.refused.Store(true)
	n.m.Close()
}

// harness is N nodes, a redlock Client over them, and an Observer that
// records to in-memory OpenTelemetry readers.
type harness struct {
	nodes  []*testNode
	rl     *redlock.Client
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
	// observer is the Observer the Client reports to.
	observer *redlockotel.Observer
}

func newHarness(t *testing.T, n int, otelOpts []redlockotel.Option, opts ...redlock.Option) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	h.tp = tp
	obs, err := redlockotel.New(append([]redlockotel.Option{
		redlockotel.WithMeterProvider(mp), redlockotel.WithTracerProvider(tp),
	}, otelOpts...)...)
	require.NoError(t, err)
	h.observer = obs
	clients := make([]redis.UniversalClient, n)
	for i := range n {
		nd := newTestNode(t, i)
		h.nodes = append(h.nodes, nd)
		clients[i] = nd.rc
	}
	warmUp(t, clients)
	// The amnesia guard (on by default) would make a key's first use wait
	// for every node: the timings these tests check are the vote's.
	h.rl, err = redlock.New(clients, append([]redlock.Option{redlock.WithObserver(obs), redlock.WithoutAmnesiaGuard()}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.rl.Close()) })
	return h
}

// warmUp loads every script on every node through a Client without the
// Observer, so that later calls make one round trip per node (no NOSCRIPT
// retry) and a node's delay applies once per call. It runs in the bubble.
func warmUp(t *testing.T, clients []redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	c, err := redlock.New(clients, redlock.WithoutAmnesiaGuard()) // the harness's scripts
	require.NoError(t, err)
	l, err := c.TryAcquire(ctx, "warm-up", 10*time.Second)
	require.NoError(t, err)
	l, err = l.Extend(ctx, 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Release(ctx))
	require.NoError(t, c.Close())
}

// holdElsewhere sets key to another owner's value on the given nodes.
func (h *harness) holdElsewhere(t *testing.T, key string, ttl time.Duration, nodes ...int) {
	t.Helper()
	for _, i := range nodes {
		require.NoError(t, h.nodes[i].m.Set(key, "someone-else"))
		h.nodes[i].m.SetTTL(key, ttl)
	}
}

// metrics collects every data point, keyed "name{k=v,...}" with the
// attributes sorted; a sum's value is its number, a histogram's
// "count=N sum=S [bucket counts]" with only the non-empty buckets' upper bounds.
func (h *harness) metrics(t *testing.T) map[string]string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, h.reader.Collect(context.Background(), &rm))
	out := map[string]string{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, redlockotel.ScopeName, sm.Scope.Name)
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				require.True(t, d.IsMonotonic, m.Name)
				for _, p := range d.DataPoints {
					out[m.Name+attrString(p.Attributes)] = fmt.Sprint(p.Value)
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrString(p.Attributes)] = histString(p.Count, float64(p.Sum), p.Bounds, p.BucketCounts)
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrString(p.Attributes)] = histString(p.Count, p.Sum, p.Bounds, p.BucketCounts)
				}
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrString(p.Attributes)] = fmt.Sprint(p.Value)
				}
			case metricdata.Gauge[float64]:
				for _, p := range d.DataPoints {
					out[m.Name+attrString(p.Attributes)] = fmt.Sprint(p.Value)
				}
			default:
				t.Fatalf("%s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	return out
}

// instruments lists "name unit" of every instrument with data.
func (h *harness) instruments(t *testing.T) []string {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, h.reader.Collect(context.Background(), &rm))
	var out []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out = append(out, m.Name+" "+m.Unit)
		}
	}
	sort.Strings(out)
	return out
}

func attrString(s attribute.Set) string {
	var parts []string
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+emit(kv.Value))
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// emit renders a value, a string slice as "[a b]".
func emit(v attribute.Value) string {
	if v.Type() == attribute.STRINGSLICE {
		return "[" + strings.Join(v.AsStringSlice(), " ") + "]"
	}
	return v.Emit()
}

func histString(count uint64, sum float64, bounds []float64, counts []uint64) string {
	var b []string
	for i, c := range counts {
		if c == 0 {
			continue
		}
		le := "+Inf"
		if i < len(bounds) {
			le = fmt.Sprint(bounds[i])
		}
		b = append(b, fmt.Sprintf("le%s:%d", le, c))
	}
	return fmt.Sprintf("count=%d sum=%g [%s]", count, sum, strings.Join(b, " "))
}

// span is an ended span, flattened for comparison.
type span struct {
	Name   string
	Parent string // the parent span's name, "" for a root
	Attrs  map[string]string
	Events []string // "name{attrs}"
	Status string   // "Unset", "Ok", or "Error: description"
	Start  time.Duration
	Dur    time.Duration
}

// ended returns the ended spans in the order they started, with start
// times relative to t0.
func (h *harness) ended(t0 time.Time) []span {
	names := map[string]string{}
	ended := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range h.spans.Ended() {
		id := s.SpanContext().SpanID().String()
		names[id], ended[id] = s.Name(), s
	}
	var out []span
	for _, started := range h.spans.Started() {
		s, ok := ended[started.SpanContext().SpanID().String()]
		if !ok {
			continue
		}
		sp := span{
			Name: s.Name(), Attrs: map[string]string{},
			Start: s.StartTime().Sub(t0), Dur: s.EndTime().Sub(s.StartTime()),
		}
		if s.Parent().IsValid() {
			sp.Parent = names[s.Parent().SpanID().String()]
			if sp.Parent == "" {
				sp.Parent = "(outside)"
			}
		}
		for _, kv := range s.Attributes() {
			sp.Attrs[string(kv.Key)] = emit(kv.Value)
		}
		for _, e := range s.Events() {
			sp.Events = append(sp.Events, e.Name+attrString(attribute.NewSet(e.Attributes...)))
		}
		sp.Status = s.Status().Code.String()
		if s.Status().Description != "" {
			sp.Status += ": " + s.Status().Description
		}
		out = append(out, sp)
	}
	return out
}
