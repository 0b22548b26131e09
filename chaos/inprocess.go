package chaos

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/alicebob/miniredis/v2/server"
)

// memBackend is an in-process node: a miniredis listening on its own
// loopback port, with its own clock.
//
// The clock: miniredis runs with ClockTTL(true), so TTLs follow its clock,
// and a server pre-hook sets that clock with SetTime right before every
// command to the node clock (real time + offset + (rate − 1) × real time
// since the rate was set). So expiry is exact to the command, not to a tick,
// and a JumpClock or SetClockRate applies to the very next command. For a
// client's command the hook runs without the miniredis mutex held
// (server.Dispatch calls it before the handler), so SetTime can take it.
// miniredis also dispatches every redis.call of a Lua script through the
// hook, with the mutex held by the EVAL: SetTime there would deadlock, so
// the hook tells those apart (isConnection) and lets them through. Times
// set are kept monotonic under setMu: miniredis would otherwise count a
// backward step twice when the clock moves forward again.
//
// Pause: the same hook waits while the node is paused, before it reads the
// clock, so a command queued during a pause runs at the node time it
// resumes at, as with SIGSTOP. Kill bumps gen and releases the waiters,
// which then drop their command without running it, as SIGKILL would.
type memBackend struct {
	m       *miniredis.Miniredis
	address string // kept: m.Addr() panics after Close
	clock   *nodeClock

	gen   atomic.Uint64 // incremented by kill and close
	peers sync.Map      // *server.Peer of every open client connection

	gateMu sync.Mutex
	gate   chan struct{} // non-nil while paused; closed on resume

	setMu   sync.Mutex
	lastSet time.Time // last time passed to SetTime

	infoMu  sync.Mutex
	srv     *server.Server // m.Server() of this run (Close writes m's field unlocked)
	runID   string         // INFO server's run_id: new on every start
	started time.Time      // node time of the last start, for uptime_in_seconds
	policy  string         // INFO memory's maxmemory_policy

	snap         []snapKey // Snapshot's copy of the data; nil: none
	freshPending bool      // m is a new miniredis (fresh), not started yet
}

func newMemBackend(clock *nodeClock) (*memBackend, error) {
	b := &memBackend{m: miniredis.NewMiniRedis(), clock: clock}
	b.lastSet = clock.at(time.Now())
	b.m.SetTime(b.lastSet)
	b.m.ClockTTL(true)
	if err := b.m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("chaos: start miniredis: %w", err)
	}
	b.address = b.m.Addr()
	b.newRun()
	b.m.Server().SetPreHook(b.hook)
	return b, nil
}

// newRun gives the server what a real server gets on every start: a new
// run_id, uptime from 0, and the default maxmemory_policy.
func (b *memBackend) newRun() {
	b.infoMu.Lock()
	defer b.infoMu.Unlock()
	b.srv = b.m.Server()
	b.runID = newRunID()
	b.started = b.clock.at(time.Now())
	b.policy = defaultPolicy
}

// hook runs before every command of every connection, and before every
// redis.call of a Lua script. It answers a connection's INFO itself (see
// infoText), as miniredis knows no server or memory section.
func (b *memBackend) hook(p *server.Peer, cmd string, args ...string) bool {
	if !b.isConnection(p) {
		// redis.call from a script: it runs inside its EVAL, which holds
		// the miniredis mutex (SetTime would deadlock) and whose own hook
		// already waited out any pause and set the clock.
		return false
	}
	gen := b.gen.Load()
	b.gateMu.Lock()
	gate := b.gate
	b.gateMu.Unlock()
	if gate != nil {
		<-gate
	}
	if b.gen.Load() != gen {
		// Killed while the command waited: it never runs, and no reply is
		// written (the connection is being closed).
		return true
	}
	b.syncTime()
	if cmd == "INFO" {
		b.infoMu.Lock()
		srv := b.srv
		st := infoState{runID: b.runID, uptime: b.clock.at(time.Now()).Sub(b.started), policy: b.policy, addr: b.address,
			clients: srv.ClientsLen(), conns: srv.TotalConnections(), cmds: srv.TotalCommands()}
		b.infoMu.Unlock()
		p.WriteBulk(infoText(st, args))
		return true
	}
	return false
}

// isConnection tells a client connection's peer from the throw-away peer
// of a Lua redis.call, using only exported miniredis API: a connection's
// peer has no Ctx before its first command (miniredis sets it in the
// command handlers), so we record it then; a script's peer always comes
// with a Ctx and was never recorded.
func (b *memBackend) isConnection(p *server.Peer) bool {
	if _, ok := b.peers.Load(p); ok {
		return true
	}
	if p.Ctx != nil {
		return false
	}
	b.peers.Store(p, struct{}{})
	// OnDisconnect is not synchronised: fine, the hook runs in the peer's
	// own goroutine.
	p.OnDisconnect(func() { b.peers.Delete(p) })
	return true
}

// syncTime sets the miniredis clock to the node clock, never backwards.
func (b *memBackend) syncTime() {
	b.setMu.Lock()
	defer b.setMu.Unlock()
	t := b.clock.at(time.Now())
	if t.Before(b.lastSet) {
		t = b.lastSet
	}
	b.lastSet = t
	b.m.SetTime(t)
}

func (b *memBackend) addr() string { return b.address }

func (b *memBackend) kill() error {
	b.gen.Add(1)
	b.openGate()
	// Close waits for the connections' goroutines, which the open gate
	// released.
	b.m.Close()
	return nil
}

func (b *memBackend) start(context.Context) error {
	// Restart listens on the same port again (another program could have
	// taken it meanwhile). Hooks do not survive it: set ours again before
	// the proxy lets clients in.
	start := b.m.Restart
	if b.freshPending {
		start = func() error { return b.m.StartAddr(b.address) }
	}
	if err := start(); err != nil {
		return err
	}
	b.freshPending = false
	b.newRun()
	b.m.Server().SetPreHook(b.hook)
	return nil
}

func (b *memBackend) keepsData() bool { return true }

func (b *memBackend) wipe() error {
	b.m.FlushAll()
	return nil
}

func (b *memBackend) pause() error {
	b.gateMu.Lock()
	defer b.gateMu.Unlock()
	if b.gate == nil {
		b.gate = make(chan struct{})
	}
	return nil
}

func (b *memBackend) resume() error {
	b.openGate()
	return nil
}

func (b *memBackend) openGate() {
	b.gateMu.Lock()
	defer b.gateMu.Unlock()
	if b.gate != nil {
		close(b.gate)
		b.gate = nil
	}
}

// syncClock does nothing: the hook sets the clock before every command.
func (b *memBackend) syncClock(context.Context) error { return nil }

func (b *memBackend) forgetClock() {}

func (b *memBackend) emulatesClock() bool { return false }

// stepsBack is false: syncTime keeps the miniredis clock monotonic.
func (b *memBackend) stepsBack() bool { return false }

func (b *memBackend) close() error {
	b.gen.Add(1)
	b.openGate()
	b.m.Close()
	return nil
}
