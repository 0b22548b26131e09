package chaos

import (
	"bufio"
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/d3b93e30/redlock"
)

// startProxy returns a proxy in front of target, closed at the end of the test.
func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy(target)
	if err != nil {
		t.Fatalf("NewProxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// newClient returns a go-redis client through p with the settings Redlock
// uses (redlock.NewNodeClient: no command retries, one dial attempt),
// closed at the end of the test.
func newClient(t *testing.T, p *Proxy) *redis.Client {
	t.Helper()
	rdb := redlock.NewNodeClient(p.Addr(), func(o *redis.Options) {
		o.DialTimeout = time.Second
		o.ReadTimeout, o.WriteTimeout = 2*time.Second, 2*time.Second
		o.PoolSize = 4
	})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// dialPinged returns a raw connection to addr that has answered one PING.
func dialPinged(t *testing.T, addr string) *rawConn {
	t.Helper()
	c := dialRaw(t, addr)
	if r, err := c.cmd("PING"); err != nil || r != "+PONG" {
		t.Fatalf("PING: %q %v", r, err)
	}
	return c
}

// rawProxiedNode is proxiedNode with a raw connection instead of go-redis.
func rawProxiedNode(t *testing.T) (*miniredis.Miniredis, *Proxy, *rawConn) {
	t.Helper()
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	return m, p, dialPinged(t, p.Addr())
}

// proxiedNode starts a miniredis node behind a proxy and returns them with a
// go-redis client through the proxy, already connected (one PING), all
// closed at the end of the test.
func proxiedNode(t *testing.T) (*miniredis.Miniredis, *Proxy, *redis.Client) {
	t.Helper()
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	rdb := newClient(t, p)
	ping(t, rdb)
	return m, p, rdb
}

// setTakesAtLeast sets k=v through rdb and fails the test unless the call
// took at least d and the node m then holds the value.
func setTakesAtLeast(t *testing.T, rdb *redis.Client, m *miniredis.Miniredis, d time.Duration) {
	t.Helper()
	start := time.Now()
	if err := rdb.Set(ctxTimeout(t, 2*time.Second), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	if el := time.Since(start); el < d {
		t.Fatalf("SET took %v, want >= %v", el, d)
	}
	if v, err := m.Get("k"); err != nil || v != "v" {
		t.Fatalf("node: k=%q err=%v, want v", v, err)
	}
}

// ctxTimeout returns a context that ends after d, cancelled at the end of the test.
func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// ping issues one PING with a generous timeout and fails the test on error.
func ping(t *testing.T, c interface {
	Ping(context.Context) *redis.StatusCmd
}) {
	t.Helper()
	if err := c.Ping(ctxTimeout(t, 2*time.Second)).Err(); err != nil {
		t.Fatalf("PING: %v", err)
	}
}

// eventually polls cond until it holds or 2 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rawConn is a bare RESP connection, for checks that go-redis's pool would
// hide (it silently replaces connections it finds dead).
type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// cmd sends a command (space-separated words) and returns the first reply line.
func (c *rawConn) cmd(line string) (string, error) {
	if err := c.send(line); err != nil {
		return "", err
	}
	return c.readLine()
}

// send writes a command (space-separated words) as a RESP array.
func (c *rawConn) send(line string) error {
	words := strings.Fields(line)
	b := []byte("*" + strconv.Itoa(len(words)) + "\r\n")
	for _, w := range words {
		b = append(b, "$"+strconv.Itoa(len(w))+"\r\n"+w+"\r\n"...)
	}
	_ = c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Write(b)
	return err
}

func (c *rawConn) readLine() (string, error) {
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	s, err := c.r.ReadString('\n')
	return strings.TrimRight(s, "\r\n"), err
}

func TestProxyPassThrough(t *testing.T) {
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	if p.Target() != m.Addr() {
		t.Fatalf("Target() = %q, want %q", p.Target(), m.Addr())
	}
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("Addr() = %q, want 127.0.0.1:PORT", p.Addr())
	}
	rdb := newClient(t, p)
	ctx := ctxTimeout(t, 2*time.Second)

	// A value much larger than one read buffer crosses in several chunks.
	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
	if err := rdb.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}
	got, err := rdb.Get(ctx, "big").Result()
	if err != nil || got != big {
		t.Fatalf("GET: err=%v, len=%d, want len=%d", err, len(got), len(big))
	}
	if v, _ := m.Get("big"); v != big {
		t.Fatalf("node has len %d, want %d", len(v), len(big))
	}

	// The proxy counts a chunk once its Write returned, which can be just
	// after the client has read it: wait for the count to catch up.
	eventually(t, "byte counts", func() bool {
		st := p.stats()
		return st.RequestBytes >= int64(len(big)) && st.ReplyBytes >= int64(len(big))
	})
	st := p.stats()
	if st.Accepted < 1 || st.Open < 1 {
		t.Errorf("Stats accepted=%d open=%d, want >= 1 each", st.Accepted, st.Open)
	}
	if st.RequestBytes < int64(len(big)) || st.ReplyBytes < int64(len(big)) {
		t.Errorf("Stats bytes req=%d rep=%d, want >= %d each", st.RequestBytes, st.ReplyBytes, len(big))
	}
	if st.DroppedRequestBytes != 0 || st.DroppedReplyBytes != 0 {
		t.Errorf("Stats dropped req=%d rep=%d, want 0", st.DroppedRequestBytes, st.DroppedReplyBytes)
	}
}

func TestProxyDelayReplies(t *testing.T) {
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	rdb := newClient(t, p)
	ping(t, rdb) // open the pooled connection first: the delay applies to it

	const delay = 50 * time.Millisecond
	p.DelayReplies(delay)
	start := time.Now()
	ping(t, rdb)
	if el := time.Since(start); el < delay {
		t.Fatalf("PING took %v, want >= %v", el, delay)
	}

	setTakesAtLeast(t, rdb, m, delay)
}

func TestProxyDelayReplyOutlivesClientTimeout(t *testing.T) {
	// The "delayed replies" failure mode: the SET lands, the client gives up.
	m, p, rdb := proxiedNode(t)

	p.DelayReplies(300 * time.Millisecond)
	err := rdb.Set(ctxTimeout(t, 50*time.Millisecond), "k", "v", 0).Err()
	if err == nil {
		t.Fatal("SET succeeded, want a timeout")
	}
	eventually(t, "key set on the node", func() bool { return m.Exists("k") })
}

func TestProxyDelayRequests(t *testing.T) {
	m, p, rdb := proxiedNode(t)

	const delay = 50 * time.Millisecond
	p.DelayRequests(delay)
	setTakesAtLeast(t, rdb, m, delay)
}

func TestProxyDelayDoesNotThrottle(t *testing.T) {
	// Ten requests written 5 ms apart on one connection under a 200 ms delay:
	// delivery is pipelined (about 250 ms in all), not serialised (>= 2 s).
	_, p, c := rawProxiedNode(t)

	const (
		delay = 200 * time.Millisecond
		n     = 10
	)
	p.DelayRequests(delay)
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := c.send("PING"); err != nil {
			t.Fatalf("send: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i := 0; i < n; i++ {
		if r, err := c.readLine(); err != nil || r != "+PONG" {
			t.Fatalf("reply %d: %q %v", i, r, err)
		}
	}
	el := time.Since(start)
	if el < delay {
		t.Fatalf("%d PINGs took %v, want >= %v", n, el, delay)
	}
	if el >= n*delay*3/4 {
		t.Fatalf("%d PINGs took %v: the delay throttles the reader", n, el)
	}
}

func TestProxyDropReplies(t *testing.T) {
	m, p, rdb := proxiedNode(t)

	p.DropReplies(true)
	err := rdb.Set(ctxTimeout(t, 150*time.Millisecond), "k", "v", 0).Err()
	if err == nil {
		t.Fatal("SET succeeded with replies dropped, want a timeout")
	}
	// The reply was lost, but the node executed the command.
	eventually(t, "key set on the node", func() bool { return m.Exists("k") })
	if st := p.stats(); st.DroppedReplyBytes == 0 {
		t.Errorf("DroppedReplyBytes = 0, want > 0")
	}

	p.DropReplies(false)
	ping(t, rdb)
}

func TestProxyDropRequests(t *testing.T) {
	m, p, rdb := proxiedNode(t)

	p.DropRequests(true)
	err := rdb.Set(ctxTimeout(t, 150*time.Millisecond), "k", "v", 0).Err()
	if err == nil {
		t.Fatal("SET succeeded with requests dropped, want a timeout")
	}
	if st := p.stats(); st.DroppedRequestBytes == 0 {
		t.Errorf("DroppedRequestBytes = 0, want > 0")
	}

	p.DropRequests(false)
	ping(t, rdb) // a round trip after the drop: a lost SET would have landed by now
	if m.Exists("k") {
		t.Fatal("key is set on the node, want the request lost")
	}
}

func TestProxyDropKeepsConnectionOpen(t *testing.T) {
	m, p, c := rawProxiedNode(t)

	p.DropReplies(true)
	if err := c.send("SET k v"); err != nil {
		t.Fatal(err)
	}
	// Wait until the whole "+OK\r\n" reply has been read and discarded.
	eventually(t, "reply dropped", func() bool { return p.stats().DroppedReplyBytes >= 5 })
	if !m.Exists("k") {
		t.Fatal("key not set on the node")
	}
	p.DropReplies(false)
	// The same connection still works; the lost +OK never shows up.
	if r, err := c.cmd("ECHO after"); err != nil || !strings.HasPrefix(r, "$") {
		t.Fatalf("ECHO header: %q %v", r, err)
	}
	if r, err := c.readLine(); err != nil || r != "after" {
		t.Fatalf("ECHO body: %q %v", r, err)
	}
}

func TestProxyHold(t *testing.T) {
	m, p, rdb := proxiedNode(t)

	p.Hold(true)
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- rdb.Set(ctxTimeout(t, 3*time.Second), "k", "v", 0).Err() }()

	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("SET returned during hold: %v", err)
	default:
	}
	if m.Exists("k") {
		t.Fatal("key set on the node during hold")
	}

	p.Hold(false)
	if err := <-done; err != nil {
		t.Fatalf("SET after release: %v", err)
	}
	if el := time.Since(start); el < 100*time.Millisecond {
		t.Fatalf("SET took %v, want >= 100ms", el)
	}
	if v, _ := m.Get("k"); v != "v" {
		t.Fatalf("node: k=%q, want v", v)
	}
}

func TestProxyHoldReplies(t *testing.T) {
	// Hold also pauses the node->client direction: a reply the node has
	// already sent is not delivered until release.
	_, p, c := rawProxiedNode(t)

	// The reply delay leaves time to turn Hold on after the request has
	// reached the node but before the reply is due.
	p.DelayReplies(300 * time.Millisecond)
	before := p.stats().RequestBytes
	if err := c.send("ECHO held"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "request delivered", func() bool { return p.stats().RequestBytes > before })
	p.Hold(true)
	p.DelayReplies(0)

	got := make(chan string, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
		_, _ = c.r.ReadString('\n') // "$4"
		s, _ := c.r.ReadString('\n')
		got <- strings.TrimRight(s, "\r\n")
	}()
	select {
	case s := <-got:
		t.Fatalf("reply %q delivered during hold", s)
	case <-time.After(400 * time.Millisecond):
	}
	p.Hold(false)
	if s := <-got; s != "held" {
		t.Fatalf("reply after release = %q, want held", s)
	}
}

func TestProxyHoldLateApply(t *testing.T) {
	// The "slow or paused node" failure mode: the client gives up and closes
	// its connection during the hold, yet the held SET still reaches the node
	// when the link resumes, and only then is the connection closed.
	m, p, rdb := proxiedNode(t)

	p.Hold(true)
	if err := rdb.Set(ctxTimeout(t, 50*time.Millisecond), "k", "v", 0).Err(); err == nil {
		t.Fatal("SET succeeded during hold, want a timeout")
	}
	time.Sleep(20 * time.Millisecond)
	if m.Exists("k") {
		t.Fatal("key set on the node during hold")
	}
	p.Hold(false)
	eventually(t, "late SET applied", func() bool { return m.Exists("k") })
}

func TestProxyDownUp(t *testing.T) {
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	addr := p.Addr()
	rdb := newClient(t, p)
	conn := rdb.Conn() // one pinned connection, so its failure is visible
	t.Cleanup(func() { _ = conn.Close() })
	ping(t, conn)

	if err := p.Down(); err != nil {
		t.Fatalf("Down: %v", err)
	}
	if err := p.Down(); err != nil {
		t.Fatalf("second Down: %v", err)
	}

	start := time.Now()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded while down")
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial while down: %v, want ECONNREFUSED", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("refused dial took %v", el)
	}

	if err := conn.Ping(ctxTimeout(t, time.Second)).Err(); err == nil {
		t.Fatal("PING on a connection open before Down succeeded")
	}
	if err := rdb.Ping(ctxTimeout(t, time.Second)).Err(); err == nil {
		t.Fatal("PING through a down proxy succeeded")
	}
	eventually(t, "no open connection", func() bool { return p.stats().Open == 0 })

	if err := p.Up(); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if err := p.Up(); err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if p.Addr() != addr {
		t.Fatalf("Addr changed across Down/Up: %q -> %q", addr, p.Addr())
	}
	ping(t, rdb)
	if err := rdb.Set(ctxTimeout(t, time.Second), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after Up: %v", err)
	}
	if !m.Exists("k") {
		t.Fatal("key not set on the node after Up")
	}
}

func TestProxyCloseConns(t *testing.T) {
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	rdb := newClient(t, p)
	conn := rdb.Conn()
	t.Cleanup(func() { _ = conn.Close() })
	ping(t, conn)
	accepted := p.stats().Accepted

	p.CloseConns()
	if err := conn.Ping(ctxTimeout(t, time.Second)).Err(); err == nil {
		t.Fatal("PING on a connection open before CloseConns succeeded")
	}
	eventually(t, "node side closed", func() bool { return m.CurrentConnectionCount() == 0 })

	ping(t, rdb) // a new connection
	if got := p.stats().Accepted; got <= accepted {
		t.Fatalf("Accepted = %d after reconnect, want > %d", got, accepted)
	}
}

func TestProxyHeal(t *testing.T) {
	m, p, rdb := proxiedNode(t)

	p.DelayRequests(5 * time.Second)
	p.DelayReplies(5 * time.Second)
	p.DropRequests(true)
	p.DropReplies(true)
	p.Hold(true)
	p.Heal()
	// Any fault left would make this miss its 1 s deadline.
	if err := rdb.Set(ctxTimeout(t, time.Second), "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET after Heal: %v", err)
	}
	if !m.Exists("k") {
		t.Fatal("key not set after Heal")
	}

	// Heal does not bring a down proxy up.
	if err := p.Down(); err != nil {
		t.Fatal(err)
	}
	p.Heal()
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatal("dial succeeded after Down+Heal")
	}
}

func TestProxyPropagatesClose(t *testing.T) {
	m := miniredis.RunT(t)
	addr := m.Addr()
	p := startProxy(t, addr)

	// Client closes: the node side is closed too.
	c := dialPinged(t, p.Addr())
	c.Close()
	eventually(t, "node side closed", func() bool { return m.CurrentConnectionCount() == 0 })
	eventually(t, "proxy conn gone", func() bool { return p.stats().Open == 0 })

	// Node goes away: the client side is closed too.
	c = dialPinged(t, p.Addr())
	m.Close()
	if r, err := c.readLine(); err == nil {
		t.Fatalf("read after node close: %q, want an error", r)
	}
	eventually(t, "proxy conn gone", func() bool { return p.stats().Open == 0 })

	// Target unreachable: the client is accepted, then closed.
	c = dialRaw(t, p.Addr())
	if r, err := c.cmd("PING"); err == nil {
		t.Fatalf("PING with the node down: %q, want an error", r)
	}

	if err := m.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	c = dialRaw(t, p.Addr())
	if r, err := c.cmd("PING"); err != nil || r != "+PONG" {
		t.Fatalf("PING after node restart: %q %v", r, err)
	}
}

func TestProxyConcurrentFaults(t *testing.T) {
	m := miniredis.RunT(t)
	p := startProxy(t, m.Addr())
	rdb := newClient(t, p)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
				_ = rdb.Incr(ctx, "n").Err()
				cancel()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 8 {
			case 0:
				p.DelayRequests(time.Millisecond)
			case 1:
				p.DelayReplies(2 * time.Millisecond)
			case 2:
				p.DropRequests(i%16 == 2)
			case 3:
				p.DropReplies(i%16 == 3)
			case 4:
				p.Hold(true)
			case 5:
				p.Hold(false)
			case 6:
				p.CloseConns()
			case 7:
				_ = p.stats()
				p.Heal()
			}
			time.Sleep(time.Millisecond)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	p.Heal()
	ping(t, rdb)
}

func TestProxyCloseLeavesNoGoroutine(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	m, err := miniredis.Run()
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(m.Addr())
	if err != nil {
		t.Fatal(err)
	}

	// Connections in every state: idle, with delayed bytes queued, held.
	idle := dialRaw(t, p.Addr())
	if r, err := idle.cmd("PING"); err != nil || r != "+PONG" {
		t.Fatalf("PING: %q %v", r, err)
	}
	p.DelayRequests(10 * time.Second)
	delayed := dialRaw(t, p.Addr())
	if err := delayed.send("PING"); err != nil {
		t.Fatal(err)
	}
	p.Hold(true)
	held := dialRaw(t, p.Addr())
	if err := held.send("PING"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "3 conns", func() bool { return p.stats().Open == 3 })

	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := p.Up(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Up after Close: %v, want net.ErrClosed", err)
	}
	if err := p.Down(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Down after Close: %v, want net.ErrClosed", err)
	}
	if st := p.stats(); st.Open != 0 {
		t.Fatalf("Open = %d after Close, want 0", st.Open)
	}
	for _, c := range []*rawConn{idle, delayed, held} {
		if r, err := c.readLine(); err == nil {
			t.Fatalf("read after Close: %q, want an error", r)
		}
		c.Close()
	}
	m.Close()
	goleak.VerifyNone(t, ignore)
}
