//go:build !redlock_mutants

package redlock

import "time"

// mutantKnobs holds no knobs in a build without the redlock_mutants tag
// (see mutants_on.go): every line marked "chaos mutant hook" then does what
// the correct lock does, and the library does not link the harness's
// mutation package.
type mutantKnobs struct{}

func (mutantKnobs) Quorum(_, correct int) int                 { return correct }
func (mutantKnobs) AcquireStart(start, _ time.Time) time.Time { return start }
func (mutantKnobs) IgnoresLoss() bool                         { return false }
func (mutantKnobs) NeverExtends() bool                        { return false }
func (mutantKnobs) ConstantTerm() bool                        { return false }
func (mutantKnobs) ResignsBlindly() bool                      { return false }
func (mutantKnobs) RecampaignKeepsTerm() bool                 { return false }
func (mutantKnobs) Slots(n int) int                           { return n }
