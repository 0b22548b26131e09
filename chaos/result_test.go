package chaos

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// A Report sums up the oracle's report of a trial, and its JSON form (what
// `redlock chaos --json` prints per trial) is every detail the oracle
// recorded, not only the summed-up fields.
func TestReport_SumsUpTheOracleAndItsJSONKeepsEveryDetail(t *testing.T) {
	o := oracle.NewOracle()
	o.Declare(2, 3)
	at := func(ms int) time.Time { return o.Start().Add(time.Duration(ms) * time.Millisecond) }
	a := o.Acquired(0, 2, at(0), at(100), time.Millisecond, 1)
	b := o.Acquired(1, 1, at(50), at(150), time.Millisecond, 1) // overlaps a, lower token
	o.Wrote(a, oracle.ResourcePlain, 2, true, at(10))
	o.Wrote(a, oracle.ResourceFenced, 2, true, at(10))
	o.Wrote(b, oracle.ResourcePlain, 1, true, at(60))
	o.Wrote(b, oracle.ResourceFenced, 1, false, at(60))
	o.Released(a, at(90))
	o.Released(b, at(140))
	o.Failed(1, at(20), time.Millisecond, 2, "quorum not reached")
	o.Fault(2, "killed", at(30), at(40))
	full := o.Report()

	r := newReport(full)
	assert.Equal(t, Report{Acquisitions: 2, FailedAcquires: 1, Violations: full.Violations, BelievedViolations: full.BelievedViolations, StaleWritesPlain: full.StaleWritesPlain,
		StaleWritesFenced: 0, RejectedWritesFenced: 1, FencedWrites: 2, TokenOrderViolations: full.TokenOrderViolations, Faults: 1, detail: full}, r)
	assert.Positive(t, r.Violations)
	assert.Positive(t, r.TokenOrderViolations)

	got, err := json.Marshal(r)
	require.NoError(t, err)
	want, err := json.Marshal(full)
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(got))
	assert.Contains(t, string(got), `"failure_reasons":{"quorum not reached":1}`)
}
