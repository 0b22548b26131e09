package chaos

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// Every client of a multi-key workload locks a set that contains the
// workload key (so any two sets overlap and the oracle's exclusion check is
// per key), the sets name their keys in different orders, and every fourth
// client locks the key alone.
func TestMultiSet(t *testing.T) {
	for _, key := range []string{"chaos", "{tag}:k"} {
		seen := map[string]bool{}
		for i := range 8 {
			s := multiSet(key, i)
			assert.Contains(t, s, key)
			if i%4 == 3 {
				assert.Equal(t, []string{key}, s)
			}
			seen[s[0]] = true
		}
		assert.Len(t, seen, 3, "the sets start with different keys")
	}
	assert.Equal(t, "{chaos}:a", tagged("chaos", ":a"))
	assert.Equal(t, "{tag}:k:a", tagged("{tag}:k", ":a"))
	s, ok := Find("multi-key")
	require.True(t, ok)
	assert.Equal(t, s, AsMulti(s))
}

// multiTrials is how many trials each scenario gets in
// TestMultiCatalogue_InProcess: one in CI; REDLOCK_MULTI_TRIALS=n for more.
func multiTrials() int {
	if n, err := strconv.Atoi(os.Getenv("REDLOCK_MULTI_TRIALS")); err == nil && n > 0 {
		return n
	}
	return 1
}

// Every catalogue scenario, run with multi-key locks (AsMulti) on in-process
// nodes, keeps the lock's safety promises per key: where the lock is safe no
// two holders of a key overlap, no promise breaks, and the fenced resource
// refuses every stale write (unless the scenario breaks fencing itself).
// On a busy machine the short trials may take no lock at all (a liveness
// miss, as for the election's in-process run): that is logged, and the
// verdict must then be Safe only with REDLOCK_MULTI_CATALOGUE=1.
func TestMultiCatalogue_InProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("the whole catalogue with multi-key locks")
	}
	runMultiCatalogue(t, InProcess, nil)
}

// A few scenarios of the catalogue with multi-key locks on real
// redis-servers, every time: contention, a lost minority, lost replies,
// and two beyond the lock's limits (a paused holder, amnesia) where each
// key's fencing must hold. REDLOCK_MULTI_CATALOGUE=1 runs the whole
// catalogue (and makes a liveness miss a failure).
func TestMultiCatalogue_RedisServer(t *testing.T) {
	redisserver.Require(t)
	only := []string{"no-faults", "minority-killed", "lost-replies", "client-pause", "amnesia-unguarded", "multi-key"}
	if os.Getenv("REDLOCK_MULTI_CATALOGUE") != "" {
		only = nil
	}
	runMultiCatalogue(t, RedisServer, only)
}

// runMultiCatalogue runs the scenarios of the catalogue named in only (all
// when only is nil), and the multi-key scenario, with multi-key locks
// (AsMulti) on backend.
func runMultiCatalogue(t *testing.T, backend Backend, only []string) {
	strict := os.Getenv("REDLOCK_MULTI_CATALOGUE") != ""
	ctx := context.Background()
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, s := range append(Catalogue(), multiScenarios()...) {
		if len(s.Workload.Modes) > 0 && s.Workload.Modes[0] == ModeExec {
			continue // exec's own workload: nothing for multi-key locks to show
		}
		if only != nil && !slices.Contains(only, s.Name) {
			continue
		}
		s = AsMulti(s).Scaled(testTimeScale)
		expect := s.Expect
		s.Expect = Safe
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(s.Name, func(t *testing.T) {
				cluster := newCatalogueCluster(t, backend)
				res, err := Run(ctx, cluster, s, multiTrials(), 13, func(line string) { t.Log(line) })
				require.NoError(t, err)
				for _, n := range res.Notes {
					t.Log("note:", n)
				}
				if res.Skipped != "" {
					t.Logf("skipped: %s", res.Skipped)
					return
				}
				assert.Zero(t, res.BrokenTrials, "%s: a promise of the lock failed", s.Name)
				if expect == Safe {
					assert.Zero(t, res.Violations, "%s: two holders of a key overlapped", s.Name)
					assert.Zero(t, res.StalePlain, "%s: a stale write in a safe scenario", s.Name)
				} else {
					t.Logf("%s (expected %s for the lock): %s", s.Name, expect, res.Observed)
				}
				if !s.FencingBreaks {
					assert.Zero(t, res.StaleFenced, "the fenced resource accepted a stale token's write")
					assert.Zero(t, res.TokenOrder, "tokens out of order")
				}
				if res.LivenessMisses == res.Trials && !strict {
					t.Logf("%s: every trial missed its liveness check (a busy machine?); REDLOCK_MULTI_CATALOGUE=1 makes that a failure", s.Name)
					return
				}
				if expect == Safe {
					assert.Equal(t, Safe, res.Observed, "%s", s.Name)
				} else {
					assert.NotEqual(t, Broken, res.Observed, "%s", s.Name)
				}
			})
		})
	}
	wg.Wait()
}
