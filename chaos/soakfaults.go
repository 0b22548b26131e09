package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// soakFault is one fault of the soak's schedule: what the catalogue
// scenario it comes from showed (so a violation during a safe one is a
// defect of the library, not a known limit), and how to apply it through
// the chaos injector. apply returns what it hit, and blocks until the
// fault is undone.
type soakFault struct {
	name     string
	scenario string // the catalogue scenario that shows it (docs)
	unsafe   bool
	apply    func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string
}

// soakSchedule returns the faults of the schedule: the catalogue's
// failure modes that are safe with the library's defaults, and, with
// unsafe, the documented-unsafe ones.
//
// Safe with the defaults (amnesia guard on, drift factor 0.01, fencing):
//
//   - kill-restart: kill -9 a random minority, restart it 2 s later with
//     its data (appendfsync always) — minority-killed.
//   - kill-amnesia: kill -9 one node, restart it 1 s later without its
//     data; the amnesia guard quarantines its votes — churn-guarded.
//   - sigstop: SIGSTOP a random minority for 1 s, then SIGCONT — paused-node.
//   - slow-link: one node's replies arrive 1 s late through its proxy for
//     3 s — slow-node.
//   - blackhole: a random minority loses every request and reply for 3 s
//     — minority-partition.
//   - rolling-restart: a majority, one node after another, killed and
//     restarted with its data 500 ms later, 1 s apart — minority-killed,
//     one at a time.
//   - client-pause: the next Acquire holder freezes for 2 × TTL after
//     acquiring, then writes once: only the fenced register is safe, and it
//     must refuse the write — client-pause (unsafe for the plain resource,
//     so its late-write overlaps are counted apart, not as defects).
//
// Unsafe (documented limits): total-amnesia (every node killed and
// restarted without data at once — nothing is left that remembers a lock)
// and clock-jump (the overlap of two quorums jumps its clock TTL forward —
// clock-jump).
func soakSchedule(unsafe bool) []soakFault {
	faults := []soakFault{
		{name: "kill-restart", scenario: "minority-killed", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			nodes := inj.pick(NodeSet{Pick: PickRandomMinority}, nil)
			return r.applyWait(ctx, inj, Fault{Action: ActionKill, Nodes: fixed(nodes), For: 2 * time.Second}, 2*time.Second, nodes)
		}},
		{name: "kill-amnesia", scenario: "churn-guarded", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			nodes := []int{rng.IntN(inj.nodes)}
			r.applyNow(ctx, inj, Fault{Action: ActionKill, Nodes: fixed(nodes)})
			sleepCtx(ctx, time.Second)
			r.applyNow(context.WithoutCancel(ctx), inj, Fault{Action: ActionRestartAmnesia, Nodes: fixed(nodes)})
			return nodeList(nodes)
		}},
		{name: "sigstop", scenario: "paused-node", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			nodes := inj.pick(NodeSet{Pick: PickRandomMinority}, nil)
			return r.applyWait(ctx, inj, Fault{Action: ActionPause, Nodes: fixed(nodes), Amount: time.Second}, time.Second, nodes)
		}},
		{name: "slow-link", scenario: "slow-node", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			nodes := []int{rng.IntN(inj.nodes)}
			return r.applyWait(ctx, inj, Fault{Action: ActionDelayReplies, Nodes: fixed(nodes), Amount: time.Second, For: 3 * time.Second}, 3*time.Second, nodes)
		}},
		{name: "blackhole", scenario: "minority-partition", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			nodes := inj.pick(NodeSet{Pick: PickRandomMinority}, nil)
			return r.applyWait(ctx, inj, Fault{Action: ActionPartition, Nodes: fixed(nodes), For: 3 * time.Second}, 3*time.Second, nodes)
		}},
		{name: "rolling-restart", scenario: "minority-killed", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			nodes := inj.pick(NodeSet{Pick: PickRandomMajority}, nil)
			for _, n := range nodes {
				r.applyWait(ctx, inj, Fault{Action: ActionKill, Nodes: fixed([]int{n}), For: 500 * time.Millisecond}, 500*time.Millisecond, nil)
			}
			return "one after another: " + nodeList(nodes)
		}},
		{name: "client-pause", scenario: "client-pause", apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
			r.pauses.Add(1)
			sleepCtx(ctx, 2*r.opt.TTL)
			return fmt.Sprintf("the next Acquire holder, %v", 2*r.opt.TTL)
		}},
	}
	if unsafe {
		faults = append(faults,
			soakFault{name: "total-amnesia", scenario: "amnesia-unguarded", unsafe: true, apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
				all := make([]int, inj.nodes)
				for i := range all {
					all[i] = i
				}
				r.applyNow(ctx, inj, Fault{Action: ActionKill, Nodes: fixed(all)})
				sleepCtx(ctx, 200*time.Millisecond)
				r.applyNow(context.WithoutCancel(ctx), inj, Fault{Action: ActionRestartAmnesia, Nodes: fixed(all)})
				return "every node"
			}},
			soakFault{name: "clock-jump", scenario: "clock-jump", unsafe: true, apply: func(ctx context.Context, r *soakRun, inj *injector, rng *rand.Rand) string {
				nodes := inj.pick(NodeSet{Pick: PickOverlap}, nil)
				r.applyNow(ctx, inj, Fault{Action: ActionJumpClock, Nodes: fixed(nodes), Amount: r.opt.TTL})
				return fmt.Sprintf("%s +%v", nodeList(nodes), r.opt.TTL)
			}},
		)
	}
	return faults
}

func fixed(nodes []int) NodeSet { return NodeSet{Pick: PickFixed, Nodes: nodes} }

func nodeList(nodes []int) string {
	s := ""
	for i, n := range nodes {
		if i > 0 {
			s += ","
		}
		s += fmt.Sprintf("node%d", n)
	}
	return s
}

// applyNow applies f through the injector now; an error is the run's.
func (r *soakRun) applyNow(ctx context.Context, inj *injector, f Fault) {
	if err := inj.apply(ctx, f, nil); err != nil && ctx.Err() == nil {
		r.addFaultErr(err.Error())
	}
}

// applyWait applies f (whose undoing the injector schedules after f.For,
// or which ends by itself after d) and waits until d and 500 ms more have
// passed, so that the undoing is done before anything else touches the
// nodes, and names nodes.
func (r *soakRun) applyWait(ctx context.Context, inj *injector, f Fault, d time.Duration, nodes []int) string {
	r.applyNow(ctx, inj, f)
	sleepCtx(ctx, d+500*time.Millisecond)
	return nodeList(nodes)
}

// schedule runs the fault schedule until ctx ends: every FaultEvery, the
// next fault of a seeded shuffle of soakSchedule, each undone (or healed)
// before the next begins.
func (r *soakRun) schedule(ctx context.Context, inj *injector) {
	rng := rand.New(rand.NewPCG(r.opt.Seed, 0xfa17))
	faults := soakSchedule(r.opt.Unsafe)
	var order []int
	for {
		if sleepCtx(ctx, r.opt.FaultEvery); ctx.Err() != nil {
			return
		}
		if len(order) == 0 {
			order = rng.Perm(len(faults))
		}
		f := faults[order[0]]
		order = order[1:]
		begin := time.Now()
		at := begin.Sub(r.start)
		if f.unsafe {
			r.mu.Lock()
			r.unsafeAt = append(r.unsafeAt, [2]time.Duration{at, at + time.Hour}) // closed below
			r.mu.Unlock()
		}
		r.nfault.Add(1)
		detail := f.apply(ctx, r, inj, rng)
		// Undone: a heal for what the schedule left (an emulated clock
		// jump stays, a restarted node is up again).
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := r.cluster.HealAll(hctx); err != nil && ctx.Err() == nil {
			r.addFaultErr(fmt.Sprintf("heal after %s: %v", f.name, err))
		}
		cancel()
		end := time.Since(r.start)
		r.mu.Lock()
		if f.unsafe {
			r.unsafeAt[len(r.unsafeAt)-1][1] = end + 3*r.opt.TTL
		}
		r.faults = append(r.faults, SoakFault{At: at, For: end - at, Name: f.name, Detail: detail, Unsafe: f.unsafe})
		r.mu.Unlock()
	}
}
