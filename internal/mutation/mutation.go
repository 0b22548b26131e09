// Package mutation holds the switches that turn the redlock library into a
// deliberately broken lock (a mutant), so that the chaos harness can prove it
// detects each kind of fault: a harness that never fails a broken lock proves
// nothing about a correct one.
//
// There are two kinds of mutation:
//
//   - Knobs, read by a handful of hook lines in the library (each marked
//     "chaos mutant hook"). A Client carries its own Knobs in its options
//     (see NewOption), so mutants are per Client, never global: a nil *Knobs,
//     the only value users can ever have, changes nothing.
//   - Rewrites of the library's Lua scripts, made on the wire by a go-redis
//     hook (ScriptHook) on the node connections of the chaos cluster. The
//     library's scripts are not touched. Every rewrite must change its
//     script: when the script text changes, Check fails instead of the
//     mutant silently becoming the correct lock.
//
// The library connects to it only in a build with the redlock_mutants build
// tag (Tag): `go test -tags redlock_mutants ./chaos`, or a redlock binary
// built so for `redlock chaos --mutants`. The package is internal: only the
// chaos harness uses it.
package mutation

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Knobs are the library-level mutations of one Client. The zero value and
// nil change nothing. Methods are nil-safe, so hook lines read
// `cfg.mutant.X(...)` without a nil check.
type Knobs struct {
	// QuorumOne counts a lock held once a single node granted it.
	QuorumOne bool
	// QuorumHalf uses N/2 votes instead of N/2+1 (no majority: two
	// "quorums" need not intersect).
	QuorumHalf bool
	// NoElapsed does not subtract the time the acquisition took: the
	// validity is counted from when the replies arrived.
	NoElapsed bool
	// LeaseIgnoresLoss keeps a Lease's (and Do's) context alive when an
	// extension fails or the validity runs out.
	LeaseIgnoresLoss bool
	// KeepAliveNeverExtends makes a Lease never send an extension.
	KeepAliveNeverExtends bool
	// ExecIgnoresLoss makes `redlock exec`'s supervision (execjob.Supervise)
	// leave its job running when the lock is lost.
	ExecIgnoresLoss bool
	// ElectionTermConstant gives every leadership term 1: terms do not
	// increase across leaders.
	ElectionTermConstant bool
	// ResignWithoutOwnerCheck makes Leadership.Resign delete the election's
	// key on every node, whoever holds it, before its release.
	ResignWithoutOwnerCheck bool
	// LeadKeepsTerm makes Lead give every leadership after its first
	// the first one's term.
	LeadKeepsTerm bool
	// SemaphoreExtraSlot gives a semaphore of N permits N+1 slots.
	SemaphoreExtraSlot bool
}

// Quorum returns the number of votes a Client of n nodes needs, given the
// correct one (n/2+1).
func (k *Knobs) Quorum(n, correct int) int {
	switch {
	case k == nil:
		return correct
	case k.QuorumOne:
		return 1
	case k.QuorumHalf:
		return max(n/2, 1)
	}
	return correct
}

// AcquireStart returns the instant an acquisition's validity is counted
// from: start (before the first request), or with NoElapsed the instant the
// quorum was reached.
func (k *Knobs) AcquireStart(start, acquiredAt time.Time) time.Time {
	if k != nil && k.NoElapsed {
		return acquiredAt
	}
	return start
}

// IgnoresLoss reports whether a Lease must not end its context on a loss.
func (k *Knobs) IgnoresLoss() bool { return k != nil && k.LeaseIgnoresLoss }

// NeverExtends reports whether a Lease must skip its extensions.
func (k *Knobs) NeverExtends() bool { return k != nil && k.KeepAliveNeverExtends }

// ExecKeepsJob reports whether execjob.Supervise must not stop its job when
// the lock is lost.
func (k *Knobs) ExecKeepsJob() bool { return k != nil && k.ExecIgnoresLoss }

// ConstantTerm reports whether every leadership's term must be 1.
func (k *Knobs) ConstantTerm() bool { return k != nil && k.ElectionTermConstant }

// ResignsBlindly reports whether Resign must delete the election's key
// without the owner check.
func (k *Knobs) ResignsBlindly() bool { return k != nil && k.ResignWithoutOwnerCheck }

// RecampaignKeepsTerm reports whether Lead must keep its first term.
func (k *Knobs) RecampaignKeepsTerm() bool { return k != nil && k.LeadKeepsTerm }

// Slots returns the number of slots of a semaphore of n permits.
func (k *Knobs) Slots(n int) int {
	if k != nil && k.SemaphoreExtraSlot {
		return n + 1
	}
	return n
}

// NewOption returns a redlock.Option (as any, to avoid an import cycle)
// that makes a Client use k. The root package sets it in an init function
// of a build with the redlock_mutants tag; it is nil in any other build (see
// Available).
var NewOption func(k *Knobs) any

// Scripts maps the name of each Lua script of the library ("acquire",
// "release", ...) to its source. The root package fills it in the same init
// function as NewOption.
var Scripts = map[string]string{}

// Tag is the build tag that puts the mutant hooks into the library.
const Tag = "redlock_mutants"

// Available reports whether this program was built with the mutant hooks
// (the build tag Tag): without them no mutant can run.
func Available() bool { return NewOption != nil }

// Rewrite replaces Old by New in the named library script, a script-level
// mutation. Old must occur in the script.
type Rewrite struct {
	Script string
	Old    string
	New    string
}

// Compile applies rewrites to the library's scripts and returns the mutated
// sources by the SHA1 of the original (the EVALSHA the library sends). It
// returns an error when a named script does not exist, or when Old does not
// occur in it or the rewrite leaves it unchanged: the script changed, and
// the mutant must be updated.
func Compile(rewrites []Rewrite) (map[string]string, error) {
	mutated := map[string]string{}
	bySHA := map[string]string{}
	for _, rw := range rewrites {
		src, ok := Scripts[rw.Script]
		if !ok {
			return nil, fmt.Errorf("mutation: no library script %q (have %s)", rw.Script, strings.Join(slices.Sorted(maps.Keys(Scripts)), ", "))
		}
		if cur, done := mutated[rw.Script]; done {
			src = cur
		}
		if !strings.Contains(src, rw.Old) || rw.Old == rw.New {
			return nil, fmt.Errorf("mutation: script %q no longer contains %q: update the mutant", rw.Script, rw.Old)
		}
		mutated[rw.Script] = strings.ReplaceAll(src, rw.Old, rw.New)
	}
	for name, src := range mutated {
		bySHA[sha(Scripts[name])] = src
	}
	return bySHA, nil
}

func sha(src string) string {
	h := sha1.Sum([]byte(src))
	return hex.EncodeToString(h[:])
}

// ScriptHook returns a go-redis hook that runs the mutated source instead of
// the original wherever a connection sends EVALSHA (or EVAL) of a script in
// mutated (from Compile). Other commands pass unchanged.
func ScriptHook(mutated map[string]string) redis.Hook { return scriptHook(mutated) }

type scriptHook map[string]string

func (h scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) >= 2 {
			name, _ := args[0].(string)
			body, _ := args[1].(string)
			var src string
			var ok bool
			switch strings.ToLower(name) {
			case "evalsha":
				src, ok = h[body]
			case "eval":
				src, ok = h[sha(body)]
			}
			if ok {
				// Args returns the command's own slice: the new source is
				// what gets written to the connection.
				args[0], args[1] = "eval", src
			}
		}
		return next(ctx, cmd)
	}
}

// SHA returns the SHA1 of a script's source, as EVALSHA names it.
func SHA(src string) string { return sha(src) }
