package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/d3b93e30/redlock/internal/faultlog"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// injector applies faults during one trial and records them in the oracle.
type injector struct {
	cluster *Cluster // the nodes faults act on; nil for a Target's
	target  Target   // the nodes faults act on, for RunTarget
	nodes   int      // how many nodes there are
	key     string   // the workload's lock key, for ActionEvictKey
	oracle  *oracle.Oracle
	log     *faultlog.Log // the schedule, and the bands in force

	// clientProxies[c][n] is client c's own proxy to node n, when the
	// scenario has per-client faults.
	clientProxies [][]*Proxy

	mu  sync.Mutex
	rng *rand.Rand
	err error
}

func newInjector(cluster *Cluster, o *oracle.Oracle, seed uint64) *injector {
	return &injector{cluster: cluster, nodes: len(cluster.Nodes()), oracle: o, log: faultlog.New(o), rng: rand.New(rand.NewPCG(seed, 0x5eed))}
}

// scheduleFaults puts the faults at time zero in place before any client
// starts, and the timed ones on timers; it returns the faults triggered by
// workload events, for trigger. If a fault at time zero fails, it stops the
// injector and returns the error.
func (inj *injector) scheduleFaults(ctx context.Context, faults []Fault) (triggered []Fault, err error) {
	var timed []Fault
	for _, f := range faults {
		switch {
		case f.On != nil:
			triggered = append(triggered, f)
		case f.At == 0:
			if err := inj.apply(ctx, f, nil); err != nil {
				inj.stop()
				return nil, err
			}
		default:
			timed = append(timed, f)
		}
	}
	for _, f := range timed {
		inj.schedule(ctx, f.At, func() { inj.applyLogged(ctx, f, nil) })
	}
	return triggered, nil
}

// trigger applies the faults among triggered that fire on acquisition a.
func (inj *injector) trigger(ctx context.Context, triggered []Fault, a acquisition) {
	for _, f := range triggered {
		if f.On.Client != a.Client || f.On.Nth != a.Nth {
			continue
		}
		granted := a.granted()
		if f.At > 0 {
			inj.schedule(ctx, f.At, func() { inj.applyLogged(ctx, f, granted) })
			continue
		}
		inj.applyLogged(ctx, f, granted)
	}
}

func (inj *injector) firstErr() error {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	return inj.err
}

func (inj *injector) fail(err error) {
	inj.mu.Lock()
	defer inj.mu.Unlock()
	if inj.err == nil {
		inj.err = err
	}
}

// schedule runs fn after d unless the trial ended first; stop cancels it or
// waits for it.
func (inj *injector) schedule(ctx context.Context, d time.Duration, fn func()) {
	inj.log.After(ctx, d, fn)
}

func (inj *injector) applyLogged(ctx context.Context, f Fault, granted []int) {
	if err := inj.apply(ctx, f, granted); err != nil && ctx.Err() == nil {
		inj.fail(err)
	}
}

// stop cancels pending timers, waits for running ones, and closes the
// fault bands still open.
func (inj *injector) stop() { inj.log.Stop() }

// pick resolves a NodeSet to node indices; granted are the nodes that
// granted the acquisition that triggered the fault.
func (inj *injector) pick(ns NodeSet, granted []int) []int {
	n := inj.nodes
	minority := n - (n/2 + 1)
	random := func(k int) []int {
		inj.mu.Lock()
		perm := inj.rng.Perm(n)
		inj.mu.Unlock()
		out := perm[:min(k, n)]
		slices.Sort(out)
		return out
	}
	switch ns.Pick {
	case PickFixed:
		return ns.Nodes
	case PickRandomMinority:
		return random(minority)
	case PickRandomMajority:
		return random(n/2 + 1)
	case PickRandom:
		return random(ns.Count)
	case PickOverlap:
		out := make([]int, 0, 2)
		for i := range 2*(n/2+1) - n {
			out = append(out, i)
		}
		return out
	case PickMinorityTail:
		out := make([]int, 0, minority)
		for i := n - minority; i < n; i++ {
			out = append(out, i)
		}
		return out
	case PickMinorityHead:
		out := make([]int, 0, minority)
		for i := range minority {
			out = append(out, i)
		}
		return out
	case PickGranted:
		return granted[:min(len(granted), max(ns.Count, 1))]
	case PickQuorumRest:
		q := n/2 + 1
		out := make([]int, 0, q)
		for i := 2*q - n; i < q && (ns.Count <= 0 || len(out) < ns.Count); i++ {
			out = append(out, i)
		}
		return out
	case PickAll:
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	return nil
}

// apply applies one fault to its nodes now, and schedules its undoing.
func (inj *injector) apply(ctx context.Context, f Fault, granted []int) error {
	for k, i := range inj.pick(f.Nodes, granted) {
		if i < 0 || i >= inj.nodes {
			return fmt.Errorf("chaos: fault %s names node index %d, but the cluster has nodes 0 to %d", f.Action, i, inj.nodes-1)
		}
		if k > 0 && f.Stagger > 0 {
			one := f
			one.Stagger = 0
			one.Nodes = NodeSet{Pick: PickFixed, Nodes: []int{i}}
			inj.schedule(ctx, time.Duration(k)*f.Stagger, func() { inj.applyLogged(ctx, one, nil) })
			continue
		}
		var err error
		if inj.target != nil {
			err = inj.applyToTarget(ctx, f, i)
		} else if len(f.Clients) > 0 {
			err = inj.applyToClients(ctx, f, i)
		} else {
			err = inj.applyToNode(ctx, f, i)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// applyToNode applies f to node i now, records it in the oracle, and
// schedules its undoing after f.For.
func (inj *injector) applyToNode(ctx context.Context, f Fault, i int) error {
	node := inj.cluster.Node(i)
	now := time.Now()
	label := string(f.Action)
	var err error
	band := true // the fault lasts until undone or the trial ends
	switch f.Action {
	case ActionKill:
		err = node.Kill()
		label = "killed"
	case ActionRestart:
		err = node.Restart(ctx)
		if errors.Is(err, ErrNeedsPersistence) {
			// Without persistence a real server cannot come back with
			// its data; for reviving a killed node that is the same.
			err = node.RestartAmnesia(ctx)
		}
		inj.closeBand(i, "killed", now)
		band = false
	case ActionRestartAmnesia:
		err = node.RestartAmnesia(ctx)
		inj.closeBand(i, "killed", now)
		label, band = "amnesia", false
	case ActionPause:
		err = node.Pause(f.Amount)
		label = "paused"
		inj.oracle.Fault(i, label, now, now.Add(f.Amount))
		band = false
	case ActionDelayRequests, ActionDelayReplies, ActionDropRequests, ActionDropReplies:
		label = applyTraffic(node, f)
	case ActionPartition:
		node.Partition(true)
		label = "partitioned"
	case ActionHealNetwork:
		node.HealNetwork()
		inj.closeNetworkBands(i, now)
		band = false
	case ActionJumpClock:
		err = node.JumpClock(f.Amount)
		label, band = clockStepLabel(f.Amount), false
	case ActionClockRate:
		err = node.SetClockRate(f.Rate)
		label = fmt.Sprintf("clock ×%g", f.Rate)
	case ActionFlush:
		err = node.Flush(ctx)
		label, band = "flushed", false
	case ActionEvictKey:
		if inj.key == "" {
			return fmt.Errorf("chaos: fault %s needs the workload's key", f.Action)
		}
		err = node.EvictKey(ctx, inj.key)
		label, band = "key evicted", false
	case ActionReplace:
		err = node.Replace(ctx)
		inj.closeBand(i, "killed", now)
		label, band = "replaced", false
	case ActionSnapshot:
		err = node.Snapshot(ctx)
		label, band = "snapshot", false
	case ActionRestartStale:
		err = node.RestartFromSnapshot(ctx)
		inj.closeBand(i, "killed", now)
		label, band = "stale restart", false
	default:
		return fmt.Errorf("chaos: unknown fault action %q", f.Action)
	}
	if err != nil {
		if errors.Is(err, ErrUnsupported) {
			return fmt.Errorf("%w: %s on node %d: %v", errUnsupported, f.Action, i, err)
		}
		return fmt.Errorf("chaos: %s on node %d: %w", f.Action, i, err)
	}
	if band {
		network := f.Action != ActionKill && f.Action != ActionClockRate
		inj.log.Open(faultlog.Band{Node: i, What: label, Network: network}, now)
	} else if f.Action != ActionPause && f.Action != ActionHealNetwork && f.Action != ActionRestart {
		inj.oracle.Fault(i, label, now, now)
	}
	if f.For > 0 && band {
		inj.scheduleUndo(ctx, f, i, label)
	}
	return nil
}

// scheduleUndo undoes f on node i after f.For, closing its band labelled
// label: a killed node is restarted (with its data where it can be), a clock
// rate goes back to 1, a network fault is healed.
func (inj *injector) scheduleUndo(ctx context.Context, f Fault, i int, label string) {
	undo := f
	undo.For = 0
	switch f.Action {
	case ActionKill:
		undo.Action = ActionRestart
	case ActionClockRate:
		undo.Rate = 1
	default:
		undo.Action = ActionHealNetwork
	}
	undo.Nodes = NodeSet{Pick: PickFixed, Nodes: []int{i}}
	inj.schedule(ctx, f.For, func() {
		inj.closeBand(i, label, time.Now())
		inj.applyLogged(ctx, undo, nil)
	})
}

// trafficTarget is what a traffic fault acts on: a node (its proxy, for
// every client) or one client's own proxy to a node.
type trafficTarget interface {
	DelayRequests(time.Duration)
	DelayReplies(time.Duration)
	DropRequests(bool)
	DropReplies(bool)
}

// applyTraffic applies f, a delay or loss of requests or replies, to t and
// returns the label of its fault band.
func applyTraffic(t trafficTarget, f Fault) string {
	switch f.Action {
	case ActionDelayRequests:
		t.DelayRequests(f.Amount)
		return "requests +" + f.Amount.String()
	case ActionDelayReplies:
		t.DelayReplies(f.Amount)
		return "replies +" + f.Amount.String()
	case ActionDropRequests:
		t.DropRequests(true)
		return "requests lost"
	default: // ActionDropReplies: callers pass only these four actions
		t.DropReplies(true)
		return "replies lost"
	}
}

// applyToClients applies a network fault to node i as f.Clients reach it
// (their own proxies), and schedules its undoing after f.For.
func (inj *injector) applyToClients(ctx context.Context, f Fault, i int) error {
	now := time.Now()
	for _, c := range f.Clients {
		if c < 0 || c >= len(inj.clientProxies) {
			return fmt.Errorf("chaos: fault %s names client %d of %d", f.Action, c, len(inj.clientProxies))
		}
		p := inj.clientProxies[c][i]
		var label string
		switch f.Action {
		case ActionDelayRequests, ActionDelayReplies, ActionDropRequests, ActionDropReplies:
			label = applyTraffic(p, f)
		case ActionPartition:
			p.DropRequests(true)
			p.DropReplies(true)
			label = "partitioned"
		case ActionHealNetwork:
			p.Heal()
			inj.closeNetworkBands(i, now)
			continue
		default:
			return fmt.Errorf("chaos: fault %s cannot be limited to some clients (only network faults can)", f.Action)
		}
		label = fmt.Sprintf("%s for client %d", label, c)
		inj.log.Open(faultlog.Band{Node: i, What: label, Network: true}, now)
		if f.For > 0 {
			lbl := label
			inj.schedule(ctx, f.For, func() {
				p.Heal()
				inj.closeBand(i, lbl, time.Now())
			})
		}
	}
	return nil
}

// closeNetworkBands closes node's open network-fault bands (HealNetwork
// clears them all at once).
func (inj *injector) closeNetworkBands(node int, at time.Time) {
	inj.log.Close(at, func(b faultlog.Band) bool { return b.Node == node && b.Network })
}

// closeBand closes node's open band labelled what.
func (inj *injector) closeBand(node int, what string, at time.Time) {
	inj.log.Close(at, func(b faultlog.Band) bool { return b.Node == node && b.What == what })
}
