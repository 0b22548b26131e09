package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// The cross-check judges the fenced resource's history a second time, with
// porcupine's linearizability checker and code that shares nothing with the
// Oracle's analysis: a bug in either shows up as a disagreement.
//
// The model is the fenced register as a correct lock and a correct
// fencing.Register make it look. Its state is the highest token accepted and
// the acquisition time of the newest hold whose write was accepted. A write
// (input: its hold's acquisition time and its token; output: accepted or
// not) may happen only if
//
//   - rejected: its token is below the highest accepted (the register refuses
//     nothing else);
//   - accepted: its token is at least the highest, and its hold was not
//     acquired before a hold whose write was already accepted (no stale
//     write).
//
// Each write spans from just before the call to its return, so writes that
// raced may take effect in either order.
type fenceState struct {
	highest  uint64
	newest   time.Duration
	anyWrite bool
}

type fenceInput struct {
	acquired time.Duration
	token    uint64
}

var fencedRegister = porcupine.Model{
	Init: func() any { return fenceState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, accepted := state.(fenceState), input.(fenceInput), output.(bool)
		if !accepted {
			return in.token < s.highest, s
		}
		if in.token < s.highest || (s.anyWrite && in.acquired < s.newest) {
			return false, s
		}
		return true, fenceState{highest: in.token, newest: max(s.newest, in.acquired), anyWrite: true}
	},
}

// crossCheckTimeout bounds porcupine's search (the check is NP-hard in
// general; histories here have few overlapping writes).
const crossCheckTimeout = 10 * time.Second

// crossCheck runs porcupine over the fenced writes of h and compares its
// verdict with the Oracle's count of stale fenced writes. It returns an
// error when porcupine finds no legal order but the Oracle saw no stale
// write: the Oracle missed one, or the register refused a write it should have
// taken. The opposite (the Oracle counts a stale write, porcupine finds an
// order without one) is reported as a note; since the oracle, too, lets
// writes whose spans overlap take effect in either order, only a timed-out
// search could lead there.
func crossCheck(h oracle.History, staleFenced int) (note string, err error) {
	var ops []porcupine.Operation
	for _, w := range h.Writes {
		if w.Resource != oracle.ResourceFenced {
			continue
		}
		hold := h.Holds[w.Hold-1]
		ops = append(ops, porcupine.Operation{
			ClientId: w.Client,
			Input:    fenceInput{acquired: hold.Acquired, token: w.Token},
			Call:     int64(w.At),
			Output:   w.Accepted,
			Return:   int64(max(w.End, w.At)),
		})
	}
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	switch res := porcupine.CheckOperationsTimeout(fencedRegister, ops, crossCheckTimeout); {
	case res == porcupine.Illegal && staleFenced == 0:
		return "", fmt.Errorf("chaos: cross-check: porcupine finds no legal order of the %d fenced writes, but the oracle counts no stale write", len(ops))
	case res == porcupine.Ok && staleFenced > 0:
		return fmt.Sprintf("cross-check: the oracle's %d stale fenced writes raced with other writes; porcupine finds an order without them", staleFenced), nil
	case res == porcupine.Unknown:
		return "cross-check: porcupine timed out", nil
	}
	return "", nil
}
