package chaos

import (
	"fmt"
	"slices"
	"time"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// clockBackStep is how far the clock-back-amnesia scenario sets B's quorum's
// clocks back: far more than the time between A's token and the counters'
// re-creation (docs/fencing.md, assumption C).
const clockBackStep = time.Minute

// clockBackScenario is the way docs/fencing.md says fencing tokens can go
// out of order, measured: a counter re-created after its node's clock
// stepped back by more than the time since the last token. w is the
// catalogue's holder-and-rival workload (A = client 0, B = client 1, which
// starts once A holds), cut and back the faults that make A's quorum the
// nodes outside the minority tail, and afterA the trigger of A's
// acquisition.
//
// The nodes B can use are the overlap of two quorums, which restarts
// without its data (its counter for the key is gone), and the tail, which
// was cut off while A acquired (before each trial the key is used without
// fencing, so the tail has no counter for it either). Their clocks step back
// a minute, so both seed B's counters from a clock a minute behind the one
// that seeded A's token. It needs real clocks: in-process and with emulated
// clocks a backward step is unsupported, and the scenario is skipped.
func clockBackScenario(w Workload, cut, back Fault, afterA *Trigger) Scenario {
	step := func(ns NodeSet) Fault {
		return Fault{On: afterA, Nodes: ns, Action: ActionJumpClock, Amount: -clockBackStep}
	}
	return Scenario{
		Name: "clock-back-amnesia",
		Summary: fmt.Sprintf("the overlap of two quorums restarts without its data; it and the minority tail (B's quorum) step their clocks back %v while A holds; guard off",
			clockBackStep),
		Expect: Unsafe,
		Why: "fencing's documented limit, on purpose: B's quorum re-creates the key's counters from clocks a minute behind the one that seeded A's token, " +
			"so B's token is below A's (TOKEN ORDER shows it). The fenced resource orders writes by token, not by holder: once it has seen A's token it refuses B, the later holder; " +
			"a write of B that lands first is followed by A's, which count as stale fenced writes. Mutual exclusion is gone too, as in amnesia-unguarded",
		Workload: w, Duration: 2 * w.TTL, Availability: Available, MinNodes: 3,
		FencingBreaks: true,
		Faults: []Fault{
			cut, back,
			step(NodeSet{Pick: PickOverlap}),
			step(NodeSet{Pick: PickMinorityTail}),
			{On: afterA, Nodes: NodeSet{Pick: PickOverlap}, Action: ActionRestartAmnesia},
		},
	}
}

// tokenOrderNotes explains each pair of consecutive holds (in acquisition
// order) whose tokens did not rise: what the fenced resource made of the
// later holder's writes, and of the earlier holder's writes made after the
// later one acquired.
func tokenOrderNotes(h oracle.History) []string {
	holds := slices.Clone(h.Holds)
	slices.SortStableFunc(holds, func(a, b oracle.HoldRecord) int { return int(a.Acquired - b.Acquired) })
	var notes []string
	for i := 1; i < len(holds); i++ {
		a, b := holds[i-1], holds[i]
		if b.Token > a.Token || (a.Token == 0 && b.Token == 0) {
			continue
		}
		var bOK, bAll, aAfter int
		for _, w := range h.Writes {
			if w.Resource != oracle.ResourceFenced {
				continue
			}
			switch {
			case w.Hold == b.ID:
				bAll++
				if w.Accepted {
					bOK++
				}
			case w.Hold == a.ID && w.Accepted && w.At > b.Acquired:
				aAfter++
			}
		}
		notes = append(notes, fmt.Sprintf("token order: client %d's token %d is not above client %d's %d (acquired %.0f ms earlier); "+
			"the fenced resource accepted %d of the later holder's %d writes, and %d writes of the earlier holder made after the later one acquired",
			b.Client, b.Token, a.Client, a.Token, float64(b.Acquired-a.Acquired)/float64(time.Millisecond), bOK, bAll, aAfter))
	}
	return notes
}
