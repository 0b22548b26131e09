package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxyDialTimeout bounds how long a proxied connection waits to reach the
// target node before the client side is closed.
const proxyDialTimeout = 5 * time.Second

// proxyReadBuf is the size of the buffer each direction reads into.
const proxyReadBuf = 32 << 10

// Proxy is an in-process TCP proxy in front of one Redis node (miniredis or a
// real redis-server). Clients dial Addr(); every accepted connection is paired
// with a fresh connection to Target(). Network faults (delay, drop, hold,
// down, connection resets) are proxy-wide settings that apply immediately to
// connections that are already open as well as to new ones, so they behave the
// same on both backends.
//
// Each direction of a proxied connection has a reader and a writer goroutine.
// The reader stamps every chunk with the time it was read and the delay in
// force at that moment, then queues it; the writer delivers chunks in order,
// each no earlier than stamp+delay and never while Hold is on. The reader
// never waits for the writer, so a delay adds latency without reducing
// throughput, and bytes held or delayed are buffered in memory without bound.
//
// A Proxy logs nothing. All methods are safe for concurrent use, including
// while traffic flows. The zero value is not usable; create one with NewProxy
// and release it with Close.
type Proxy struct {
	addr string // fixed for the proxy's life

	reqDelay atomic.Int64 // nanoseconds, client->node
	repDelay atomic.Int64 // nanoseconds, node->client
	dropReq  atomic.Bool
	dropRep  atomic.Bool

	accepted     atomic.Int64
	reqBytes     atomic.Int64
	repBytes     atomic.Int64
	reqDropBytes atomic.Int64
	repDropBytes atomic.Int64

	mu     sync.Mutex
	target string
	ln     net.Listener // nil while Down or after Close
	closed bool
	conns  map[*proxyConn]struct{}
	holdCh chan struct{} // non-nil while Hold is on; closed on release

	wg sync.WaitGroup // every goroutine the proxy started
}

// proxyStats is a snapshot of a Proxy's counters, returned by Proxy.stats.
// Byte counts are in bytes and cumulative over the proxy's life.
type proxyStats struct {
	// Accepted is the number of client connections accepted so far.
	Accepted int64
	// Open is the number of proxied connections currently open.
	Open int
	// RequestBytes is the number of client->node bytes delivered to the node.
	RequestBytes int64
	// ReplyBytes is the number of node->client bytes delivered to clients.
	ReplyBytes int64
	// DroppedRequestBytes is the number of client->node bytes discarded by
	// DropRequests.
	DroppedRequestBytes int64
	// DroppedReplyBytes is the number of node->client bytes discarded by
	// DropReplies.
	DroppedReplyBytes int64
}

// NewProxy listens on a free loopback port (127.0.0.1:0) and forwards every
// accepted connection to target ("host:port"). The target is not contacted
// until a client connects, so it may be down at this point. It returns an
// error if it cannot listen.
func NewProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy listen: %w", err)
	}
	p := &Proxy{
		addr:   ln.Addr().String(),
		target: target,
		conns:  make(map[*proxyConn]struct{}),
	}
	p.mu.Lock()
	p.startLocked(ln)
	p.mu.Unlock()
	return p, nil
}

// Addr returns the address clients should dial, "127.0.0.1:PORT". It is fixed
// for the proxy's life, including across Down and Up.
func (p *Proxy) Addr() string { return p.addr }

// Target returns the node address ("host:port") that new connections are
// forwarded to.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

// Down stops listening, so new dials to Addr() are refused (ECONNREFUSED),
// and closes every open connection. Faults set on the proxy are kept. Down on
// a proxy that is already down does nothing. It returns net.ErrClosed if the
// proxy was closed, or the error from closing the listener.
func (p *Proxy) Down() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return net.ErrClosed
	}
	ln := p.ln
	p.ln = nil
	conns := p.takeConnsLocked()
	p.mu.Unlock()

	var err error
	if ln != nil {
		err = ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	return err
}

// Up listens again on the same address (Addr()) after Down. Up on a proxy
// that is already up does nothing. It returns net.ErrClosed if the proxy was
// closed, or an error if the address cannot be bound again (for example
// because another process took the port meanwhile).
func (p *Proxy) Up() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	if p.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("chaos: proxy re-listen on %s: %w", p.addr, err)
	}
	p.startLocked(ln)
	return nil
}

// CloseConns closes every open connection, both the client side and the node
// side, but keeps listening: to clients it looks like a node restart. Bytes
// still buffered by a delay or Hold are discarded.
func (p *Proxy) CloseConns() {
	p.mu.Lock()
	conns := p.takeConnsLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// DelayRequests delays delivery of client->node bytes: each chunk is written
// to the node d after it was read from the client. d <= 0 turns the delay off.
// The new delay applies, on open and new connections, to chunks read from now
// on; chunks already queued keep the delay they were stamped with.
func (p *Proxy) DelayRequests(d time.Duration) { p.reqDelay.Store(int64(max(d, 0))) }

// DelayReplies delays delivery of node->client bytes: each chunk is written to
// the client d after it was read from the node. d <= 0 turns the delay off.
// The new delay applies, on open and new connections, to chunks read from now
// on; chunks already queued keep the delay they were stamped with.
func (p *Proxy) DelayReplies(d time.Duration) { p.repDelay.Store(int64(max(d, 0))) }

// DropRequests, while on, discards every client->node byte read, on open and
// new connections: requests are lost and the node never sees them, but the
// connections stay open. A close by either side still propagates.
func (p *Proxy) DropRequests(on bool) { p.dropReq.Store(on) }

// DropReplies, while on, discards every node->client byte read, on open and
// new connections: the node executes the commands but the replies are lost,
// and the connections stay open. A close by either side still propagates.
func (p *Proxy) DropReplies(on bool) { p.dropRep.Store(on) }

// Hold, while on, pauses the link: bytes in both directions (and connection
// closes) keep being read and are buffered, but nothing is delivered. Turning
// it off delivers everything buffered, in order per direction, subject to any
// delay. Calling Hold with the current state does nothing.
func (p *Proxy) Hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case on && p.holdCh == nil:
		p.holdCh = make(chan struct{})
	case !on && p.holdCh != nil:
		close(p.holdCh)
		p.holdCh = nil
	}
}

// Heal clears every fault: both delays 0, both drops off, Hold off (releasing
// held bytes). It does not bring a Down proxy back Up and does not reopen
// closed connections.
func (p *Proxy) Heal() {
	p.DelayRequests(0)
	p.DelayReplies(0)
	p.DropRequests(false)
	p.DropReplies(false)
	p.Hold(false)
}

// stats returns a snapshot of the proxy's counters. Bytes still buffered by a
// delay or Hold are counted neither as forwarded nor as dropped.
func (p *Proxy) stats() proxyStats {
	p.mu.Lock()
	open := len(p.conns)
	p.mu.Unlock()
	return proxyStats{
		Accepted:            p.accepted.Load(),
		Open:                open,
		RequestBytes:        p.reqBytes.Load(),
		ReplyBytes:          p.repBytes.Load(),
		DroppedRequestBytes: p.reqDropBytes.Load(),
		DroppedReplyBytes:   p.repDropBytes.Load(),
	}
}

// Close stops listening, closes every connection (discarding buffered bytes)
// and waits for every goroutine the proxy started to return. It is
// idempotent; later calls also wait and return nil. After Close, Up and Down
// return net.ErrClosed. It returns the error from closing the listener, if
// any.
func (p *Proxy) Close() error {
	p.mu.Lock()
	var (
		ln    net.Listener
		conns []*proxyConn
	)
	if !p.closed {
		p.closed = true
		ln = p.ln
		p.ln = nil
		conns = p.takeConnsLocked()
		if p.holdCh != nil {
			close(p.holdCh)
			p.holdCh = nil
		}
	}
	p.mu.Unlock()

	var err error
	if ln != nil {
		err = ln.Close()
	}
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

// startLocked starts the accept loop for ln. p.mu must be held.
func (p *Proxy) startLocked(ln net.Listener) {
	p.ln = ln
	p.wg.Add(1)
	go p.acceptLoop(ln)
}

// takeConnsLocked empties the connection set and returns what it held.
// p.mu must be held.
func (p *Proxy) takeConnsLocked() []*proxyConn {
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	clear(p.conns)
	return conns
}

// holdChan returns a channel that is closed when Hold is released, or nil if
// Hold is off.
func (p *Proxy) holdChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holdCh
}

func (p *Proxy) acceptLoop(ln net.Listener) {
	defer p.wg.Done()
	for {
		client, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			p.mu.Lock()
			current := p.ln == ln
			p.mu.Unlock()
			if !current {
				return
			}
			// Transient failure such as EMFILE: back off briefly.
			time.Sleep(5 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		if p.closed || p.ln != ln {
			// Down or Close raced with this accept.
			p.mu.Unlock()
			client.Close()
			continue
		}
		p.accepted.Add(1)
		ctx, cancel := context.WithCancel(context.Background())
		c := &proxyConn{
			p:      p,
			client: client,
			ctx:    ctx,
			cancel: cancel,
		}
		p.conns[c] = struct{}{}
		target := p.target
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run(target)
	}
}

// proxyConn is one client connection paired with its node connection.
type proxyConn struct {
	p      *Proxy
	client net.Conn
	ctx    context.Context // done once the connection is closed
	cancel context.CancelFunc

	mu       sync.Mutex
	node     net.Conn // nil until dialed
	isClosed bool
}

// run dials the node and starts both directions.
func (c *proxyConn) run(target string) {
	defer c.p.wg.Done()
	d := net.Dialer{Timeout: proxyDialTimeout}
	node, err := d.DialContext(c.ctx, "tcp", target)
	if err != nil {
		c.close()
		return
	}
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		node.Close()
		return
	}
	c.node = node
	c.mu.Unlock()

	p := c.p
	up := &direction{
		c: c, src: c.client, dst: node,
		delay: &p.reqDelay, drop: &p.dropReq,
		sent: &p.reqBytes, dropped: &p.reqDropBytes,
		notify: make(chan struct{}, 1),
	}
	down := &direction{
		c: c, src: node, dst: c.client,
		delay: &p.repDelay, drop: &p.dropRep,
		sent: &p.repBytes, dropped: &p.repDropBytes,
		notify: make(chan struct{}, 1),
	}
	p.wg.Add(4)
	go up.read()
	go up.write()
	go down.read()
	go down.write()
}

// close closes both sides, wakes every goroutine of the connection and
// removes it from the proxy. It is idempotent.
func (c *proxyConn) close() {
	c.mu.Lock()
	if c.isClosed {
		c.mu.Unlock()
		return
	}
	c.isClosed = true
	node := c.node
	c.mu.Unlock()

	c.cancel()
	c.client.Close()
	if node != nil {
		node.Close()
	}
	c.p.mu.Lock()
	delete(c.p.conns, c)
	c.p.mu.Unlock()
}

// chunk is a piece of one direction's byte stream, or its end.
type chunk struct {
	data []byte
	at   time.Time // deliver no earlier than this
	eof  bool      // the source closed; close the connection once delivered
}

// direction moves bytes from src to dst for one proxied connection.
type direction struct {
	c        *proxyConn
	src, dst net.Conn
	delay    *atomic.Int64
	drop     *atomic.Bool
	sent     *atomic.Int64
	dropped  *atomic.Int64

	mu     sync.Mutex
	queue  []chunk
	notify chan struct{} // capacity 1; signalled on push
}

func (d *direction) push(ch chunk) {
	d.mu.Lock()
	d.queue = append(d.queue, ch)
	d.mu.Unlock()
	select {
	case d.notify <- struct{}{}:
	default:
	}
}

// pop returns the next chunk, blocking until there is one; ok is false once
// the connection is closed.
func (d *direction) pop() (ch chunk, ok bool) {
	for {
		d.mu.Lock()
		if len(d.queue) > 0 {
			ch = d.queue[0]
			d.queue[0] = chunk{}
			d.queue = d.queue[1:]
			if len(d.queue) == 0 {
				d.queue = nil
			}
			d.mu.Unlock()
			return ch, true
		}
		d.mu.Unlock()
		select {
		case <-d.notify:
		case <-d.c.ctx.Done():
			return chunk{}, false
		}
	}
}

// read keeps reading src, stamping each chunk with its delivery time, and
// never waits for the writer.
func (d *direction) read() {
	defer d.c.p.wg.Done()
	buf := make([]byte, proxyReadBuf)
	for {
		n, err := d.src.Read(buf)
		if n > 0 {
			now := time.Now()
			if d.drop.Load() {
				d.dropped.Add(int64(n))
			} else {
				data := make([]byte, n)
				copy(data, buf[:n])
				d.push(chunk{data: data, at: now.Add(time.Duration(d.delay.Load()))})
			}
		}
		if err != nil {
			// The close travels in order behind the data read before it,
			// subject to delay and hold like any byte.
			d.push(chunk{eof: true, at: time.Now().Add(time.Duration(d.delay.Load()))})
			return
		}
	}
}

// write delivers queued chunks in order, each no earlier than its stamp and
// never while Hold is on.
func (d *direction) write() {
	defer d.c.p.wg.Done()
	done := d.c.ctx.Done()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		ch, ok := d.pop()
		if !ok {
			return
		}
		if wait := time.Until(ch.at); wait > 0 {
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			select {
			case <-timer.C:
			case <-done:
				return
			}
		}
		for {
			hold := d.c.p.holdChan()
			if hold == nil {
				break
			}
			select {
			case <-hold:
			case <-done:
				return
			}
		}
		if ch.eof {
			d.c.close()
			return
		}
		n, err := d.dst.Write(ch.data)
		d.sent.Add(int64(n))
		if err != nil {
			d.c.close()
			return
		}
	}
}
