//go:build redlock_mutants

package redlock

import "github.com/d3b93e30/redlock/internal/mutation"

// This file connects the chaos harness's mutants (internal/mutation) to the
// library, in builds with the redlock_mutants tag only (the mutant runs:
// `go test -tags redlock_mutants ./chaos`, and a redlock binary built with
// it for `redlock chaos --mutants`). The knobs travel in a Client's config
// and are read by the lines marked "chaos mutant hook"; a nil
// *mutation.Knobs, the only value outside the harness, changes nothing.

// mutantKnobs are a Client's mutant knobs.
type mutantKnobs = *mutation.Knobs

func init() {
	mutation.NewOption = func(k *mutation.Knobs) any {
		return Option(func(c *config) error {
			c.mutant = k
			return nil
		})
	}
	for _, s := range scripts {
		mutation.Scripts[s.name] = s.src
	}
}
