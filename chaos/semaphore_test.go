package chaos

import (
	"context"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// The semaphore's own scenarios are safe: never more permits held than
// allowed, never two holders of a slot, and every slot's tokens rise.
func TestSemaphoreScenarios_InProcess(t *testing.T) {
	ctx := context.Background()
	cluster, err := NewCluster(tctx(t, 10*time.Second), ClusterOptions{Nodes: 5})
	require.NoError(t, err)
	defer func() { assert.NoError(t, cluster.Close()) }()
	for _, s := range SemaphoreScenarios() {
		_, ok := Find(s.Name)
		assert.True(t, ok, s.Name)
		res, err := Run(ctx, cluster, s.Scaled(testTimeScale), 2, 5, func(line string) { t.Log(line) })
		require.NoError(t, err)
		for _, n := range res.Notes {
			t.Log("note:", n)
		}
		// A loaded machine may make a trial miss its liveness check (no
		// permit taken): safety is what is asserted.
		assert.NotEqual(t, Unsafe, res.Observed, s.Name)
		assert.Zero(t, res.Violations, s.Name)
		assert.Zero(t, res.StaleFenced, s.Name)
		assert.Zero(t, res.TokenOrder, s.Name)
		t.Logf("%s: %d permits taken, %d violations", s.Name, res.Acquisitions, res.Violations)
	}
}

// The capacity check counts overlapping holds across slots: three holds of
// two permits at once is one excess, and a slot's two holders at once are
// a violation of that slot.
func TestSemaphoreTrial_JudgesCapacity(t *testing.T) {
	st := &semTrial{w: Workload{Clients: 3, Permits: 2}, main: oracle.NewOracle(), slots: map[int]*slotState{}}
	now := time.Now()
	for slot := range 3 {
		o := st.slot(slot).o
		h := o.Acquired(slot, 0, now, now.Add(time.Second), 0, 1)
		o.Released(h, now.Add(500*time.Millisecond))
	}
	tr := st.judge(Scenario{}, 5, &handoutChecks{})
	assert.Equal(t, 1, tr.report.Violations, "one start found two permits held")
	assert.Equal(t, 3, tr.report.Acquisitions)

	st = &semTrial{w: Workload{Clients: 3, Permits: 2}, main: oracle.NewOracle(), slots: map[int]*slotState{}}
	for c := range 2 {
		o := st.slot(0).o
		h := o.Acquired(c, 0, now, now.Add(time.Second), 0, 1)
		o.Released(h, now.Add(500*time.Millisecond))
	}
	tr = st.judge(Scenario{}, 5, &handoutChecks{})
	assert.Equal(t, 1, tr.report.Violations, "two holders of slot 0")
}

// semaphorePermits is the number of permits a catalogue scenario runs
// with as a semaphore: one fewer than its clients, at most 2, so that a
// rival always contends for a taken slot (a holder and a rival share one
// permit, as they share the lock).
func semaphorePermits(s Scenario) int { return min(2, max(1, s.Workload.Clients-1)) }

// runSemaphoreCatalogue runs the scenarios of the catalogue named in only
// (all when only is nil) with their clients on a semaphore
// (AsSemaphore, semaphorePermits), once: where the lock is safe the
// semaphore never exceeds its permits; everywhere, each slot's fenced
// resource refuses every stale token.
func runSemaphoreCatalogue(t *testing.T, backend Backend, only []string) {
	ctx := context.Background()
	limit := make(chan struct{}, electionParallel)
	var wg sync.WaitGroup
	for _, s := range Catalogue() {
		if only != nil && !slices.Contains(only, s.Name) {
			continue
		}
		s = AsSemaphore(s, semaphorePermits(s)).Scaled(testTimeScale)
		expect := s.Expect
		s.Expect = Safe
		wg.Go(func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			t.Run(s.Name, func(t *testing.T) {
				cluster := newCatalogueCluster(t, backend)
				res, err := Run(ctx, cluster, s, 1, 7, func(line string) { t.Log(line) })
				require.NoError(t, err)
				for _, n := range res.Notes {
					t.Log("note:", n)
				}
				if res.Skipped != "" {
					t.Logf("skipped: %s", res.Skipped)
					return
				}
				if expect == Safe {
					assert.Zero(t, res.Violations, "%s: more permits held than allowed, or two holders of a slot", s.Name)
					assert.Zero(t, res.StalePlain, s.Name)
				} else {
					t.Logf("%s (expected %s for the lock): %d violations", s.Name, expect, res.Violations)
				}
				if !s.FencingBreaks {
					assert.Zero(t, res.StaleFenced, "a slot's fenced resource accepted a stale token")
					assert.Zero(t, res.TokenOrder, "a slot's tokens out of order")
				}
				if s.Availability == Unavailable {
					assert.Zero(t, res.Acquisitions)
				}
			})
		})
	}
	wg.Wait()
	waitDialProbes(t)
}

// A few scenarios of the catalogue as semaphores, every time: contention,
// a lost minority, lost replies, and three beyond the lock's limits (a
// paused holder, a clock jump, amnesia) where each slot's fencing must hold.
// REDLOCK_SEMAPHORE_CATALOGUE=1 runs the whole catalogue (about 2 minutes
// under the race detector).
func TestSemaphoreCatalogue_InProcess(t *testing.T) {
	only := []string{"no-faults", "minority-killed", "lost-replies", "client-pause", "clock-jump", "amnesia-unguarded"}
	if os.Getenv("REDLOCK_SEMAPHORE_CATALOGUE") != "" {
		only = nil
	}
	runSemaphoreCatalogue(t, InProcess, only)
}

// The same scenarios as semaphores on real redis-servers, every time;
// REDLOCK_SEMAPHORE_CATALOGUE=1 runs the whole catalogue.
func TestSemaphoreCatalogue_RedisServer(t *testing.T) {
	redisserver.Require(t)
	only := []string{"no-faults", "minority-killed", "lost-replies", "client-pause", "clock-jump", "amnesia-unguarded"}
	if os.Getenv("REDLOCK_SEMAPHORE_CATALOGUE") != "" {
		only = nil
	}
	runSemaphoreCatalogue(t, RedisServer, only)
}

// Every catalogue scenario has a semaphore form on the workload's key.
func TestAsSemaphore(t *testing.T) {
	for _, s := range Catalogue() {
		sem := AsSemaphore(s, 3)
		assert.Equal(t, 3, sem.Workload.Permits, s.Name)
		assert.NotEqual(t, redlock.ElectionKey("chaos"), sem.Workload.key(), s.Name)
	}
}
