package chaos

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/mutation"
)

// Every mutant must still change the library: a script rewrite whose text no
// longer occurs in the script (the script changed) fails here instead of
// silently testing the correct lock.
func TestMutants_Apply(t *testing.T) {
	needMutants(t)
	names := map[string]bool{}
	for _, m := range Mutants() {
		assert.False(t, names[m.Name], "duplicate mutant %s", m.Name)
		names[m.Name] = true
		assert.NoError(t, m.check(), m.Name)
		if m.NotCovered != "" {
			assert.Empty(t, m.Scenarios, m.Name)
			continue
		}
		require.NotEmpty(t, m.Scenarios, m.Name)
		for _, s := range m.Scenarios {
			_, ok := Find(s)
			assert.True(t, ok, "mutant %s names unknown scenario %s", m.Name, s)
		}
		mutated, err := mutation.Compile(m.rewrites)
		require.NoError(t, err)
		for sha, src := range mutated {
			for name, orig := range mutation.Scripts {
				if sha == scriptSHA(orig) {
					assert.NotEqual(t, orig, src, "mutant %s leaves script %s unchanged", m.Name, name)
				}
			}
		}
	}
	stale := Mutant{Name: "stale", rewrites: []mutation.Rewrite{{Script: "release", Old: "no such text", New: "x"}}}
	assert.ErrorContains(t, stale.check(), "no longer contains")
	unknown := Mutant{Name: "unknown", rewrites: []mutation.Rewrite{{Script: "no-such-script", Old: "a", New: "b"}}}
	assert.ErrorContains(t, unknown.check(), "no library script")
	assert.Error(t, Mutant{Name: "noop"}.check())
}

// needMutants skips a test that runs mutants in a build without the mutant
// hooks (the build tag mutation.Tag), and fails it under CI=true, whose test
// command sets the tag.
func needMutants(t testing.TB) {
	t.Helper()
	if mutation.Available() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("the mutants need the library's mutant hooks: go test -tags %s", mutation.Tag)
	}
	t.Skipf("the mutants need the library's mutant hooks: go test -tags %s", mutation.Tag)
}

func scriptSHA(src string) string { return mutation.SHA(src) }

// mutantTestTrials bounds the trials per scenario in TestMutants_Caught. A
// mutant run stops at the first trial that catches it, so more trials only
// cost time when a trial misses. The narrowest catch, no-drift-factor in
// clock-drift-in-budget (a window of about 0.9% of the TTL in which the rival
// must complete an acquisition), was missed by 3 trials in a row under the
// race detector on a loaded 2-core machine (load average about 6), while one
// trial caught it on a quieter one. multi-partial-grant, which needs a
// multi-key attempt to meet a holder of part of its keys, survived 5 trials
// once in a CI run under the race detector.
const mutantTestTrials = 10

// The harness must catch every mutant in the catalogue: at least one of the
// mutant's scenarios must report a verdict other than the expected one.
func TestMutants_Caught(t *testing.T) {
	needMutants(t)
	for _, m := range Mutants() {
		if m.NotCovered != "" {
			t.Logf("mutant %s not covered: %s", m.Name, m.NotCovered)
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			cluster, err := NewCluster(ctx, ClusterOptions{Nodes: 5})
			require.NoError(t, err)
			defer func() { require.NoError(t, cluster.Close()) }()
			var caught []string
			for _, name := range m.Scenarios {
				s, _ := Find(name)
				res, err := RunMutant(ctx, cluster, s.Scaled(testTimeScale), m, mutantTestTrials, 11, nil)
				require.NoError(t, err)
				require.Empty(t, res.Skipped)
				if res.Mismatch() {
					caught = append(caught, fmt.Sprintf("%s in trial %d (%s: %s)", name, res.Trials, res.Observed, strings.Join(res.Notes, "; ")))
				}
			}
			require.NotEmpty(t, caught, "mutant %s survived %v", m.Name, m.Scenarios)
			t.Logf("%s caught by %s", m.Name, strings.Join(caught, ", "))
		})
	}
}
