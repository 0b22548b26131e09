package chaos

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// electionParallel is how many election scenarios run at once, each on a
// cluster of its own: the scenarios mostly wait (real time), so running a
// few side by side keeps the whole catalogue within about half a minute.
const electionParallel = 3

// runElectionCatalogue runs every scenario of the catalogue as a leader
// election (AsElection), once, and checks the election's invariants: a
// scenario where the lock is safe must stay safe (no two leaderships
// overlap, terms strictly increase); in the others (pauses, clock steps,
// unguarded amnesia) leaderships may overlap, but the fenced resource must
// refuse every write of a stale term and terms must still increase.
func runElectionCatalogue(t *testing.T, backend Backend) {
	ctx := context.Background()
	sem := make(chan struct{}, electionParallel)
	var wg sync.WaitGroup
	for _, s := range Catalogue() {
		s = AsElection(s).Scaled(testTimeScale)
		expect := s.Expect
		// One trial: an expected-unsafe scenario may show its overlap or
		// not (the election's extensions narrow some windows); Run would
		// retry it up to UnsafeTrialLimit times to show it.
		s.Expect = Safe
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(s.Name, func(t *testing.T) {
				cluster := newCatalogueCluster(t, backend)
				res := runTrialTakingALock(t, ctx, cluster, s, true)
				for _, n := range res.Notes {
					t.Log("note:", n)
				}
				if res.Skipped != "" {
					t.Logf("skipped on %s: %s", backend, res.Skipped)
					return
				}
				assert.NotEqual(t, Broken, res.Observed, "%s: a promise of the election failed", s.Name)
				if expect == Safe {
					assert.Equal(t, Safe, res.Observed, "%s: leaderships overlapped", s.Name)
				} else {
					t.Logf("%s (expected %s for the lock): %s", s.Name, expect, res.Observed)
				}
				if !s.FencingBreaks {
					assert.Zero(t, res.StaleFenced, "the fenced resource accepted a stale term's write")
					assert.Zero(t, res.TokenOrder, "terms out of order")
				}
				switch s.Availability {
				case Available:
					assert.Positive(t, res.Acquisitions, "no leader was elected")
				case Unavailable:
					assert.Zero(t, res.Acquisitions)
				}
			})
		})
	}
	wg.Wait()
	if pids := redisserver.LivePids(); len(pids) != 0 {
		t.Errorf("redis-server pids left after Close: %v", pids)
	}
	waitDialProbes(t)
}

func TestElectionCatalogue_InProcess(t *testing.T) {
	// A trial that elected no leader (on a busy machine every call of a
	// short trial can time out) is run again with another seed, up to 3 in
	// all (runElectionCatalogue); a miss in all three fails.
	runElectionCatalogue(t, InProcess)
}

func TestElectionCatalogue_RedisServer(t *testing.T) {
	redisserver.Require(t)
	runElectionCatalogue(t, RedisServer)
}

// Every catalogue scenario has an election form whose clients all
// campaign, on the election's key.
func TestAsElection(t *testing.T) {
	for _, s := range Catalogue() {
		e := AsElection(s)
		require.Equal(t, s.Name, e.Name)
		for i := range e.Workload.Clients {
			assert.True(t, isElectionMode(e.Workload.mode(i)), "%s client %d: %s", s.Name, i, e.Workload.mode(i))
		}
		assert.Equal(t, e.Workload.key(), "{"+electionName(e.Workload.key())+"}:leader", s.Name)
		assert.Equal(t, e, AsElection(e), "%s: an election stays as it is", s.Name)
	}
}
