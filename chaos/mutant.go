package chaos

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// Mutant is a deliberately broken build of the lock, plugged into the same
// workloads as the real one: the harness must catch every mutant, or its
// verdicts on the real lock prove nothing. A mutant changes the library
// through knobs read by a few marked hook lines, through options, or by
// rewriting the library's Lua scripts on the wire (a go-redis hook on the
// workload clients' node connections); the library's code and scripts are
// not changed.
type Mutant struct {
	// Name is the mutant's name, e.g. "quorum-one".
	Name string `json:"name"`
	// Summary says what is broken.
	Summary string `json:"summary"`
	// Scenarios are the catalogue scenarios expected to catch it: a fast
	// subset, not every scenario that would.
	Scenarios []string `json:"scenarios"`
	// NotCovered, when set, says why no scenario can run this mutant yet;
	// Scenarios is then empty.
	NotCovered string `json:"not_covered,omitempty"`

	knobs    *mutation.Knobs
	opts     []redlock.Option
	rewrites []mutation.Rewrite
}

// The script texts the script mutants replace. They are the library's
// scripts as of this commit: when a script changes, Mutant.check (run by
// TestMutants_Apply) fails and these must be updated.
const (
	ownerCheck     = "if v == ARGV[1] then"
	noOwner        = "if v then"
	setNX          = "ARGV[1], 'NX', 'PX'"
	incrCounter    = "c = redis.call('INCR', KEYS[2])"
	returnCounter  = "return {1, c, "    // a grant with the amnesia guard on, epoch not trusted
	returnCount    = "return c -- "      // a grant with the guard off, or with a trusted epoch
	returnNewEpoch = "return -2 - c -- " // a grant that created the epoch just now
	deleteKey      = "redis.call('DEL', KEYS[1])"
	readOwner      = "local v = redis.call('GET', KEYS[1])"
	extendExpire   = "redis.call('PEXPIRE', KEYS[1], ARGV[2])"
)

// Mutants returns the mutant catalogue, in the order `redlock chaos
// --mutants` runs it: the lock's, then the read/write lock's (RWMutants).
func Mutants() []Mutant {
	return append([]Mutant{
		{Name: "quorum-one", Summary: "a lock counts as held once one node granted it",
			Scenarios: []string{"no-faults"}, knobs: &mutation.Knobs{QuorumOne: true}},
		{Name: "quorum-half", Summary: "N/2 votes instead of N/2+1: two quorums need not share a node",
			Scenarios: []string{"no-faults", "contention-16"}, knobs: &mutation.Knobs{QuorumHalf: true}},
		{Name: "no-drift-factor", Summary: "drift factor 0: only the fixed 2 ms of the drift allowance is left",
			Scenarios: []string{"clock-drift-in-budget"}, opts: []redlock.Option{redlock.WithDriftFactor(0)}},
		{Name: "no-elapsed", Summary: "the time the acquisition took is not subtracted from the validity",
			Scenarios: []string{"delayed-replies"}, knobs: &mutation.Knobs{NoElapsed: true}},
		{Name: "set-without-nx", Summary: "the acquire script overwrites a key held by someone else (SET without NX)",
			Scenarios: []string{"no-faults"},
			rewrites:  []mutation.Rewrite{{Script: "acquire", Old: setNX, New: "ARGV[1], 'PX'"}}},
		{Name: "release-without-owner-check", Summary: "release deletes the key whoever holds it",
			Scenarios: []string{"no-faults", "contention-16"},
			rewrites: []mutation.Rewrite{{Script: "release", Old: ownerCheck, New: noOwner},
				{Script: "abandon", Old: ownerCheck, New: noOwner},
				{Script: "release-vouch", Old: ownerCheck, New: noOwner}}},
		{Name: "release-without-deleting", Summary: "release reports success but deletes nothing",
			Scenarios: []string{"no-faults"},
			rewrites: []mutation.Rewrite{{Script: "release", Old: deleteKey, New: "local _ = KEYS[1]"},
				{Script: "abandon", Old: deleteKey, New: "local _ = KEYS[1]"},
				{Script: "release-vouch", Old: deleteKey, New: "local _ = KEYS[1]"}}},
		{Name: "extend-without-owner-check", Summary: "extend resets the TTL of the key whoever holds it",
			Scenarios: []string{"late-extension"},
			rewrites:  []mutation.Rewrite{{Script: "extend", Old: ownerCheck, New: noOwner}}},
		{Name: "extend-recreates-key", Summary: "extend sets the key to its owner value unconditionally",
			Scenarios: []string{"late-extension"},
			rewrites: []mutation.Rewrite{{Script: "extend", Old: readOwner,
				New: "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])\n" + readOwner}}},
		{Name: "extend-revives-vanished-key", Summary: "extend re-creates the key where it has vanished (SET PX instead of PEXPIRE, under an owner check that lets a missing key pass)",
			Scenarios: []string{"majority-flushed"},
			rewrites: []mutation.Rewrite{{Script: "extend", Old: ownerCheck, New: "if v == ARGV[1] or not v then"},
				{Script: "extend", Old: extendExpire, New: "redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])"}}},
		{Name: "token-not-incremented", Summary: "a grant reads the fencing counter without incrementing it, so every holder gets the same token",
			Scenarios: []string{"no-faults"},
			rewrites:  []mutation.Rewrite{{Script: "acquire", Old: incrCounter, New: "c = tonumber(redis.call('GET', KEYS[2]) or '1')"}}},
		{Name: "token-constant", Summary: "every node reports fencing counter 41, so every token is 41",
			Scenarios: []string{"no-faults"},
			rewrites: []mutation.Rewrite{{Script: "acquire", Old: returnCounter, New: "return {1, 41, "},
				{Script: "acquire", Old: returnCount, New: "return 41 -- "},
				{Script: "acquire", Old: returnNewEpoch, New: "return -2 - 41 -- "}}},
		{Name: "lease-ignores-loss", Summary: "the lock-bound context (Do, KeepAlive) is not cancelled when an extension fails or the validity runs out",
			Scenarios: []string{"asymmetric-partition"}, knobs: &mutation.Knobs{LeaseIgnoresLoss: true}},
		{Name: "keepalive-never-extends", Summary: "KeepAlive (and Do) never extends the lock",
			Scenarios: []string{"long-holds"}, knobs: &mutation.Knobs{KeepAliveNeverExtends: true}},
		{Name: "exec-ignores-loss", Summary: "`redlock exec` does not stop its job when the lock is lost",
			Scenarios: []string{"exec-asymmetric-partition"}, knobs: &mutation.Knobs{ExecIgnoresLoss: true}},
		{Name: "election-term-constant", Summary: "every leadership's term is 1: terms do not increase from leader to leader",
			Scenarios: []string{"election-turns"}, knobs: &mutation.Knobs{ElectionTermConstant: true}},
		{Name: "resign-without-owner-check", Summary: "Resign deletes the election's key on every node whoever holds it, so a deposed leader's late resign unseats its successor",
			Scenarios: []string{"leader-isolated"}, knobs: &mutation.Knobs{ResignWithoutOwnerCheck: true}},
		{Name: "recampaign-keeps-term", Summary: "Lead, elected again after a loss, keeps the term of its first leadership",
			Scenarios: []string{"leader-isolated"}, knobs: &mutation.Knobs{LeadKeepsTerm: true}},
		{Name: "semaphore-extra-permit", Summary: "a semaphore of N permits has N+1 slots, so N+1 hold at once",
			Scenarios: []string{"semaphore-contention"}, knobs: &mutation.Knobs{SemaphoreExtraSlot: true}},
		{Name: "semaphore-slot-without-nx", Summary: "a semaphore slot is granted while another holder has it (SET without NX)",
			Scenarios: []string{"semaphore-contention"},
			rewrites:  []mutation.Rewrite{{Script: "acquire", Old: setNX, New: "ARGV[1], 'PX'"}}},
		{Name: "multi-partial-grant", Summary: "a multi-key lock is granted on a node where some of its keys are free, setting only those",
			Scenarios: []string{"multi-key"},
			rewrites:  []mutation.Rewrite{{Script: "multi-acquire", Old: "if #held > 0 then", New: "if #held >= 2 * k then"}}},
	}, RWMutants()...)
}

// findMutant returns the mutant with the given name.
func findMutant(name string) (Mutant, bool) {
	for _, m := range Mutants() {
		if m.Name == name {
			return m, true
		}
	}
	return Mutant{}, false
}

// check reports an error when one of the mutant's script rewrites no longer
// applies to the library's scripts (the script changed), or when the mutant
// changes nothing at all.
func (m Mutant) check() error {
	if m.NotCovered != "" {
		return nil
	}
	if m.knobs == nil && len(m.opts) == 0 && len(m.rewrites) == 0 {
		return fmt.Errorf("chaos: mutant %s changes nothing", m.Name)
	}
	if !mutation.Available() {
		return fmt.Errorf("chaos: mutant %s: the library was built without its mutant hooks: build with -tags %s", m.Name, mutation.Tag)
	}
	if _, err := mutation.Compile(m.rewrites); err != nil {
		return fmt.Errorf("chaos: mutant %s: %w", m.Name, err)
	}
	return nil
}

// options returns the options that make a Client this mutant.
func (m *Mutant) options() []redlock.Option {
	opts := append([]redlock.Option(nil), m.opts...)
	if m.knobs != nil {
		opts = append(opts, mutation.NewOption(m.knobs).(redlock.Option))
	}
	return opts
}

// hook returns the go-redis hook that rewrites the library's scripts, or nil
// when the mutant rewrites none.
func (m *Mutant) hook() (redis.Hook, error) {
	if len(m.rewrites) == 0 {
		return nil, nil
	}
	mutated, err := mutation.Compile(m.rewrites)
	if err != nil {
		return nil, fmt.Errorf("chaos: mutant %s: %w", m.Name, err)
	}
	return mutation.ScriptHook(mutated), nil
}
