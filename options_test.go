package redlock_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// badOptions are options whose values must be refused, with words the
// error message must contain.
var badOptions = []struct {
	name string
	opt  redlock.Option
	msg  string
}{
	{"negative drift factor", redlock.WithDriftFactor(-0.1), "drift factor"},
	{"drift factor above 1", redlock.WithDriftFactor(1.5), "drift factor"},
	{"drift factor 1", redlock.WithDriftFactor(1), "drift factor"},
	{"drift factor NaN", redlock.WithDriftFactor(math.NaN()), "drift factor"},
	{"drift factor +Inf", redlock.WithDriftFactor(math.Inf(1)), "drift factor"},
	{"zero node timeout", redlock.WithNodeTimeout(0), "node timeout"},
	{"negative node timeout", redlock.WithNodeTimeout(-time.Second), "node timeout"},
	{"nil retry policy", redlock.WithRetry(nil), "retry"},
	{"nil RetryFunc", redlock.WithRetry(redlock.RetryFunc(nil)), "retry"},
	{"negative linear delay", redlock.WithRetry(redlock.LinearRetry(-1, 0, 0)), "LinearRetry"},
	{"negative linear jitter", redlock.WithRetry(redlock.LinearRetry(0, -1, 0)), "LinearRetry"},
	{"negative linear tries", redlock.WithRetry(redlock.LinearRetry(time.Millisecond, 0, -1)), "LinearRetry"},
	{"zero exponential base", redlock.WithRetry(redlock.ExponentialRetry(0, time.Second, 0)), "ExponentialRetry"},
	{"exponential max below base", redlock.WithRetry(redlock.ExponentialRetry(time.Second, time.Millisecond, 0)), "ExponentialRetry"},
	{"negative exponential tries", redlock.WithRetry(redlock.ExponentialRetry(time.Millisecond, time.Second, -1)), "ExponentialRetry"},
	{"nil retry pointer", redlock.WithRetry((*stopRetry)(nil)), "retry"},
	{"nil owner generator", redlock.WithOwnerGenerator(nil), "owner generator"},
	{"nil named owner generator", redlock.WithOwnerGenerator(ownerFunc(nil)), "owner generator"},
	{"nil logger", redlock.WithLogger(nil), "logger"},
	{"logger without handler", redlock.WithLogger(&slog.Logger{}), "logger"},
	{"nil observer", redlock.WithObserver(nil), "observer"},
	{"nil ObserverFunc", redlock.WithObserver(redlock.ObserverFunc(nil)), "observer"},
	{"nil observer pointer", redlock.WithObserver((*eventLog)(nil)), "observer"},
	{"negative quarantine", redlock.WithQuarantine(-time.Second), "quarantine"},
	{"quarantine longer than the retention", redlock.WithQuarantine(48 * time.Hour), "retention"},
	{"nil option", nil, "nil option"},
}

// badHoldOptions are a Lease's options whose values must be refused, with
// words the error message must contain.
var badHoldOptions = []struct {
	name string
	opt  redlock.HoldOption
	msg  string
}{
	{"zero extension interval", redlock.WithExtendInterval(0), "extension interval"},
	{"negative extension interval", redlock.WithExtendInterval(-time.Second), "extension interval"},
	{"negative hold limit", redlock.WithMaxHold(-time.Second), "maximum hold time"},
	{"nil hold option", nil, "nil option"},
}

// badForTTL10s are options that New and Dial accept but every call with a
// 10 s TTL must refuse, with words the error must contain.
var badForTTL10s = []struct {
	name string
	opt  redlock.Option
	msg  string
}{
	{"retention shorter than the ttl", redlock.WithRetention(time.Second), "retention"},
	{"node timeout that leaves the ttl no validity", redlock.WithNodeTimeout(ttl10s), "smallest usable ttl"},
	{"node timeout too large for any ttl", redlock.WithNodeTimeout(math.MaxInt64), "smallest usable ttl with this drift factor and per-node timeout is none"},
}

// stopRetry is a RetryPolicy with a pointer receiver, for typed nils.
type stopRetry struct{}

func (*stopRetry) NextRetry(int) (time.Duration, bool) { return 0, false }

// ownerFunc is a named owner generator type, for typed nils.
type ownerFunc func() (string, error)

func requireInvalid(t *testing.T, err error, msg string) {
	t.Helper()
	require.ErrorIs(t, err, redlock.ErrInvalidArgument)
	assert.ErrorContains(t, err, msg)
}

// requireNoClient requires build (New or Dial with bad input) to return,
// without panicking, no Client and an ErrInvalidArgument whose text
// contains msg; it returns the error.
func requireNoClient(t *testing.T, msg string, build func() (*redlock.Client, error)) error {
	t.Helper()
	var (
		rl  *redlock.Client
		err error
	)
	require.NotPanics(t, func() { rl, err = build() })
	assert.Nil(t, rl)
	requireInvalid(t, err, msg)
	return err
}

// requireNewInvalid requires New over one node (never dialed) to refuse
// opts with an ErrInvalidArgument whose text contains msg.
func requireNewInvalid(t *testing.T, msg string, opts ...redlock.Option) {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rc.Close()
	requireNoClient(t, msg, func() (*redlock.Client, error) {
		return redlock.New([]redis.UniversalClient{rc}, opts...)
	})
}

func TestNew_BadInput(t *testing.T) {
	a := redis.NewClient(&redis.Options{Addr: "127.0.0.1:7001"})
	b := redis.NewClient(&redis.Options{Addr: "127.0.0.1:7001"}) // another client, same node
	defer a.Close()
	defer b.Close()

	for _, tc := range []struct {
		name    string
		clients []redis.UniversalClient
		msg     string
	}{
		{"no clients", nil, "no nodes"},
		{"empty list", []redis.UniversalClient{}, "no nodes"},
		{"nil client", []redis.UniversalClient{a, nil}, "client 2 of 2 is nil"},
		{"typed nil client", []redis.UniversalClient{(*redis.Client)(nil)}, "client 1 of 1 is nil"},
		{"same client twice", []redis.UniversalClient{a, a}, "same node"},
		{"same address twice", []redis.UniversalClient{a, b}, "same node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireNoClient(t, tc.msg, func() (*redlock.Client, error) { return redlock.New(tc.clients) })
		})
	}
	for _, tc := range badOptions {
		t.Run(tc.name, func(t *testing.T) {
			requireNoClient(t, tc.msg, func() (*redlock.Client, error) { return redlock.New([]redis.UniversalClient{a}, tc.opt) })
		})
	}
}

func TestDial_BadInput(t *testing.T) {
	for _, tc := range []struct {
		name   string
		urls   []string
		msg    string
		secret string // must not appear in the error
	}{
		{"no urls", nil, "no nodes", ""},
		{"wrong scheme", []string{"http://x"}, "node 1 of 1", ""},
		{"bad port", []string{"redis://127.0.0.1:7001", "redis://:bad port"}, "node 2 of 2", ""},
		{"empty url", []string{""}, "node 1 of 1", ""},
		{"bad port with password", []string{"redis://user:s3cretPw@host:notaport"}, "node 1 of 1", "s3cretPw"},
		{"password only, bad port", []string{"redis://:s3cretPw@host:x"}, "node 1 of 1", "s3cretPw"},
		{"bad scheme with password", []string{"http://user:s3cretPw@host"}, "node 1 of 1", "s3cretPw"},
		{"bad db with password", []string{"redis://user:s3cretPw@host:6379/notadb"}, "node 1 of 1", "s3cretPw"},
		{"escaped password", []string{"redis://user:s3cret%2FPw@host:x"}, "node 1 of 1", "s3cret"},
		{"@ in password", []string{"redis://user:s3c@retPw@host:x"}, "node 1 of 1", "retPw"},
		{"duplicate address", []string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7001"}, "same node", ""},
		{"duplicate address, db spelled out", []string{"redis://127.0.0.1:7001/0", "redis://127.0.0.1:7002", "redis://127.0.0.1:7001"}, "node 3 of 3", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := requireNoClient(t, tc.msg, func() (*redlock.Client, error) { return redlock.Dial(tc.urls) })
			if tc.secret != "" {
				assert.NotContains(t, err.Error(), tc.secret)
			}
		})
	}
	for _, tc := range badOptions {
		t.Run(tc.name, func(t *testing.T) {
			requireNoClient(t, tc.msg, func() (*redlock.Client, error) { return redlock.Dial([]string{"redis://127.0.0.1:7001"}, tc.opt) })
		})
	}
}

func TestDial_NamesNodesWithoutSecrets(t *testing.T) {
	rl, err := redlock.Dial([]string{
		"redis://127.0.0.1:7001",
		"rediss://127.0.0.1:7002",
		"redis://user:s3cretPw@127.0.0.1:7003/2",
		"redis://127.0.0.1:7001/1", // another database on the same server is another name
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7001/0", "127.0.0.1:7002/0", "127.0.0.1:7003/2", "127.0.0.1:7001/1"}, rl.Nodes())
	assert.Equal(t, 3, rl.Quorum())
	require.NoError(t, rl.Close())
}

func TestAcquire_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		for _, tc := range []struct {
			name string
			key  string
			ttl  time.Duration
			opts []redlock.Option
			msg  string
		}{
			{"empty key", "", ttl10s, nil, "empty key"},
			{"zero ttl", "k", 0, nil, "ttl"},
			{"negative ttl", "k", -time.Second, nil, "ttl"},
			{"ttl below 1 ms", "k", 500 * time.Microsecond, nil, "1 ms"},
			{"ttl not a whole number of ms", "k", 10*time.Second + 500*time.Microsecond, nil, "milliseconds"},
			{"ttl not above the drift", "k", 2 * time.Millisecond, nil, "drift"},
			{"ttl equal to the drift, factor 0", "k", 2 * time.Millisecond, []redlock.Option{redlock.WithDriftFactor(0)}, "drift"},
			{"node timeout equal to the ttl", "k", time.Second, []redlock.Option{redlock.WithNodeTimeout(time.Second)}, "timeout"},
			{"node timeout above the ttl", "k", time.Second, []redlock.Option{redlock.WithNodeTimeout(2 * time.Second)}, "timeout"},
		} {
			for _, try := range []bool{false, true} {
				var (
					l   *redlock.Lock
					err error
				)
				require.NotPanics(t, func() {
					if try {
						l, err = c.rl.TryAcquire(ctx, tc.key, tc.ttl, tc.opts...)
					} else {
						l, err = c.rl.Acquire(ctx, tc.key, tc.ttl, tc.opts...)
					}
				}, tc.name)
				assert.Nil(t, l, tc.name)
				require.ErrorIs(t, err, redlock.ErrInvalidArgument, tc.name)
				assert.ErrorContains(t, err, tc.msg, tc.name)
			}
		}
		for _, tc := range badOptions {
			var err error
			require.NotPanics(t, func() { _, err = c.rl.Acquire(ctx, "k", ttl10s, tc.opt) }, tc.name)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, tc.name)
			assert.ErrorContains(t, err, tc.msg, tc.name)
		}
		c.requireGone(t, "k")

		// Extend checks its TTL the same way, before any round trip.
		l := c.acquire(t, ctx, "k", ttl10s)
		for _, bad := range []time.Duration{0, -time.Second, 500 * time.Microsecond, 2 * time.Millisecond, time.Second + time.Microsecond} {
			l2, err := l.Extend(ctx, bad)
			assert.Nil(t, l2)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, "Extend(%v)", bad)
		}
		require.NoError(t, l.Release(ctx))
	})
}

func TestClient_ErrClosedAfterClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l := c.acquire(t, ctx, "k", ttl10s)
		require.NoError(t, c.rl.Close())
		require.NoError(t, c.rl.Close(), "Close is idempotent")

		_, err := c.rl.Acquire(ctx, "other", ttl10s)
		require.ErrorIs(t, err, redlock.ErrClosed)
		_, err = c.rl.TryAcquire(ctx, "other", ttl10s)
		require.ErrorIs(t, err, redlock.ErrClosed)
		_, err = l.Extend(ctx, ttl10s)
		require.ErrorIs(t, err, redlock.ErrClosed)
		require.ErrorIs(t, l.Release(ctx), redlock.ErrClosed)
		c.requireGone(t, "other")
	})
}

// Close closes the connections Dial opened: a dialed client cannot be used
// afterwards, and no goroutine is left (goleak checks at the end).
func TestDial_CloseClosesConnections(t *testing.T) {
	rl, err := redlock.Dial([]string{"redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"})
	require.NoError(t, err)
	require.NoError(t, rl.Close())
	_, err = rl.TryAcquire(context.Background(), "k", ttl10s)
	require.ErrorIs(t, err, redlock.ErrClosed)
}

// Every option is checked by every call that takes options, before any round
// trip: an invalid one never reaches an operation, where a typed nil function
// would panic. The calls that both acquire and hold (Do, Semaphore.Do,
// Campaign, Lead, CheckTTL) check both kinds; KeepAlive its HoldOptions.
func TestOptions_BadInputInEveryCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		l := c.acquire(t, ctx, "held", ttl10s)
		sem, err := c.rl.Semaphore("sem", 2)
		require.NoError(t, err)
		ran := false
		fn := func(context.Context, *redlock.Lease) error { ran = true; return nil }
		lead := func(context.Context, *redlock.Leadership) error { ran = true; return nil }
		requireRefused := func(name string, opt redlock.DoOption, msg string) {
			t.Helper()
			for call, do := range map[string]func() error{
				"Do":           func() error { return c.rl.Do(ctx, "k", ttl10s, fn, opt) },
				"Semaphore.Do": func() error { return sem.Do(ctx, ttl10s, fn, opt) },
				"Campaign":     func() error { _, err := c.rl.Campaign(ctx, "e", "a", ttl10s, opt); return err },
				"Lead":         func() error { return c.rl.Lead(ctx, "e", "a", ttl10s, lead, opt) },
				"CheckTTL":     func() error { return redlock.CheckTTL(ttl10s, opt) },
			} {
				var err error
				require.NotPanics(t, func() { err = do() }, "%s: %s", call, name)
				require.ErrorIs(t, err, redlock.ErrInvalidArgument, "%s: %s", call, name)
				assert.ErrorContains(t, err, msg, "%s: %s", call, name)
			}
		}
		for _, tc := range append(badOptions[:len(badOptions):len(badOptions)], badForTTL10s...) {
			requireRefused(tc.name, tc.opt, tc.msg)
			require.NotPanics(t, func() { _, err = c.rl.TryAcquire(ctx, "k", ttl10s, tc.opt) }, tc.name)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, "TryAcquire: %s", tc.name)
		}
		for _, tc := range badHoldOptions {
			requireRefused(tc.name, tc.opt, tc.msg)
			require.NotPanics(t, func() { _, err = l.KeepAlive(ctx, tc.opt) }, tc.name)
			require.ErrorIs(t, err, redlock.ErrInvalidArgument, "KeepAlive: %s", tc.name)
			assert.ErrorContains(t, err, tc.msg, "KeepAlive: %s", tc.name)
		}
		requireRefused("nil DoOption", nil, "nil option")
		assert.False(t, ran, "fn never ran")
		n, _ := ev.count(redlock.OpAcquire)
		assert.Equal(t, 1, n, "no attempt was made with a bad option")
		c.releaseAndRequireGone(t, ctx, l, "k")
	})
}

// A TTL must leave validity after the drift allowance and one per-node
// timeout: TTL − (TTL × factor + 2 ms) − timeout ≥ 1 ms. Each case is the
// smallest TTL that passes, and the error for one millisecond less names it.
func TestTTL_SmallestUsable(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []redlock.Option
		min  time.Duration
	}{
		// The default per-node timeout for short TTLs is its 100 ms floor:
		// 105 − 3.05 − 100 = 1.95 ms; 104 − 3.04 − 100 = 0.96 ms.
		{"defaults", nil, 105 * time.Millisecond},
		// 5 − 2.05 − 1 = 1.95 ms; 4 − 2.04 − 1 = 0.96 ms.
		{"1 ms per-node timeout", []redlock.Option{redlock.WithNodeTimeout(time.Millisecond)}, 5 * time.Millisecond},
		// 103 − 2 − 100 = 1 ms exactly.
		{"no drift factor", []redlock.Option{redlock.WithDriftFactor(0), redlock.WithNodeTimeout(100 * time.Millisecond)}, 103 * time.Millisecond},
		// 206 − 105 − 100 = 1 ms; 205 − 104.5 − 100 = 0.5 ms.
		{"drift factor 0.5", []redlock.Option{redlock.WithDriftFactor(0.5)}, 206 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newCluster(t, 3, tc.opts...)
				short := tc.min - time.Millisecond
				_, err := c.rl.TryAcquire(ctx, "job", short)
				requireInvalid(t, err, "smallest usable ttl with this drift factor and per-node timeout is "+tc.min.String())
				err = c.rl.Do(ctx, "job", short, func(context.Context, *redlock.Lease) error { return nil })
				requireInvalid(t, err, "smallest usable ttl")

				l := c.tryAcquire(t, ctx, "job", tc.min)
				assert.Positive(t, l.Validity())
				_, err = l.Extend(ctx, short)
				requireInvalid(t, err, "smallest usable ttl")
				l, err = l.Extend(ctx, tc.min)
				require.NoError(t, err)
				require.NoError(t, l.Release(ctx))
			})
		})
	}
}

// linesLogger records what go-redis logs.
type linesLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *linesLogger) Printf(_ context.Context, format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}

func (l *linesLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// The package doc's advice: go-redis's "failed to dial" lines for a dead
// node go to the logger given to redis.SetLogger, not to the standard error.
func TestGoRedisLogs_GoToSetLogger(t *testing.T) {
	rec := &linesLogger{}
	redis.SetLogger(rec)
	defer redis.SetLogger(&logging.VoidLogger{}) // as the package doc shows, and as TestMain does
	urls := make([]string, 3)
	for i := range 2 {
		m := miniredis.RunT(t)
		urls[i] = "redis://" + m.Addr()
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	urls[2] = "redis://" + ln.Addr().String()
	require.NoError(t, ln.Close()) // a dead node: connections are refused

	// Not the default 100 ms per-node timeout: on a loaded machine a live
	// node timed out, failing the one attempt or the release.
	rl, err := redlock.Dial(urls, redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	l, err := rl.TryAcquire(context.Background(), "job", ttl10s)
	require.NoError(t, err)
	require.NoError(t, l.Release(context.Background()))
	require.NoError(t, rl.Close())
	assert.Contains(t, rec.text(), "failed to dial")
}
