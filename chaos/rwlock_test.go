package chaos

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/redisserver"
)

// runRWScenarios runs every read/write scenario once with Run, as `redlock
// chaos --scenario rw-...` does, two at a time, each on a 5-node cluster of
// backend of its own: never a writer beside another holder where the
// scenario is safe, never a stale operation the fenced resource
// (fencing.RWRegister) took, the token rules hold, and the verdict is the
// expected one. The read/write mutants are TestMutants_Caught's.
func runRWScenarios(t *testing.T, backend Backend) {
	ctx := context.Background()
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, s := range RWScenarios() {
		found, ok := Find(s.Name)
		require.True(t, ok, s.Name)
		require.Equal(t, s.Name, found.Name)
		s = s.Scaled(testTimeScale)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			t.Run(s.Name, func(t *testing.T) {
				cluster := newCatalogueCluster(t, backend)
				res, err := Run(ctx, cluster, s, 1, 7, func(line string) { t.Log(line) })
				require.NoError(t, err)
				for _, n := range res.Notes {
					t.Log("note:", n)
				}
				require.Empty(t, res.Skipped)
				assert.Equal(t, rwFencedStore, res.FencedStore)
				assert.Zero(t, res.StaleFenced, "the fenced resource took a stale read or write")
				assert.Zero(t, res.TokenOrder, "a token out of order")
				if s.Expect == Safe {
					assert.Zero(t, res.Violations, "a writer held beside another holder")
					assert.Zero(t, res.StalePlain, "a stale operation in a safe scenario")
				}
				if res.LivenessMisses == res.Trials {
					// A loaded machine may starve every trial: safety is
					// what is asserted then.
					t.Logf("%s: every trial missed its liveness check (a busy machine?)", s.Name)
					return
				}
				assert.Equal(t, s.Expect, res.Observed, "verdict of %s", s.Name)
			})
		})
	}
	wg.Wait()
}

func TestRWScenarios_InProcess(t *testing.T) { runRWScenarios(t, InProcess) }

func TestRWScenarios_RedisServer(t *testing.T) {
	redisserver.Require(t)
	runRWScenarios(t, RedisServer)
}

// rw-partition cuts the readers off the first minority of the nodes and
// the writer off the last: each side keeps a majority, and the two
// majorities share at least one node, for odd and even N.
func TestPick_MinorityHeadAndTail(t *testing.T) {
	for n := 3; n <= 7; n++ {
		inj := &injector{nodes: n}
		head, tail := inj.pick(NodeSet{Pick: PickMinorityHead}, nil), inj.pick(NodeSet{Pick: PickMinorityTail}, nil)
		q := n/2 + 1
		assert.Len(t, head, n-q, "N=%d", n)
		assert.Len(t, tail, n-q, "N=%d", n)
		shared := 0
		for i := range n {
			if !slices.Contains(head, i) && !slices.Contains(tail, i) {
				shared++
			}
		}
		assert.Positive(t, shared, "N=%d: the readers' and the writer's majorities share a node", n)
	}
}
