package chaos

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/oracle"
)

// ElectionTimings is what MeasureElection measured on a cluster: how long an
// election takes to hand leadership over, for the documentation's
// comparison (docs/election.md) and bench/run.sh.
type ElectionTimings struct {
	Nodes  int           `json:"nodes"`
	TTL    time.Duration `json:"ttl_ns"`
	Drift  time.Duration `json:"drift_ns"` // the drift allowance of TTL
	Rounds int           `json:"rounds"`
	// RoundTrip is the median time of one read of every node (Leader):
	// one round trip, in parallel, to a majority.
	RoundTrip time.Duration `json:"round_trip_ns"`
	// HandoffP50 and HandoffMax: from the leader's call to Resign to the
	// waiting candidate's Campaign returning.
	HandoffP50 time.Duration `json:"handoff_p50_ns"`
	HandoffMax time.Duration `json:"handoff_max_ns"`
	// FailoverP50 and FailoverMax: from the leader's crash (its extensions
	// stop; nothing is released) to the waiting candidate's election. The
	// crash comes at a random point of the extension interval, so the
	// leader's keys have between TTL and TTL − interval left.
	FailoverP50 time.Duration `json:"failover_p50_ns"`
	FailoverMax time.Duration `json:"failover_max_ns"`
	// OvershootP50 and OvershootMax: from the instant the crashed leader's
	// keys expire (its last acquisition or extension's start + TTL) to the
	// candidate's election: what the failover costs beyond the TTL (the goal
	// is the drift allowance plus one retry delay).
	OvershootP50 time.Duration `json:"overshoot_p50_ns"`
	OvershootMax time.Duration `json:"overshoot_max_ns"`
}

// String is a few lines for a report.
func (t ElectionTimings) String() string {
	return fmt.Sprintf("election timings on %d nodes, TTL %v (drift allowance %v), %d rounds:\n"+
		"  one read of every node (round trip)  p50 %v\n"+
		"  resign -> next leader                p50 %v, max %v\n"+
		"  crash -> next leader                 p50 %v, max %v\n"+
		"  keys' expiry -> next leader          p50 %v, max %v",
		t.Nodes, t.TTL, t.Drift, t.Rounds, t.RoundTrip.Round(time.Microsecond),
		t.HandoffP50.Round(time.Microsecond), t.HandoffMax.Round(time.Microsecond),
		t.FailoverP50.Round(time.Millisecond), t.FailoverMax.Round(time.Millisecond),
		t.OvershootP50.Round(time.Microsecond), t.OvershootMax.Round(time.Microsecond))
}

// MeasureElection measures, on cluster, rounds hand-offs (a leader resigns
// while another candidate waits) and rounds crash failovers (the leader's
// extensions stop and its keys expire), with two candidates, each with a
// Client of its own, in election name "timings". The candidates use the
// library's defaults (DefaultRetry) and the given TTL. The cluster should be
// free of faults.
func MeasureElection(ctx context.Context, cluster *Cluster, ttl time.Duration, rounds int) (ElectionTimings, error) {
	if rounds < 1 {
		return ElectionTimings{}, errors.New("chaos: MeasureElection needs at least one round")
	}
	res := ElectionTimings{Nodes: len(cluster.Nodes()), TTL: ttl, Drift: redlock.Drift(ttl, redlock.DefaultDriftFactor), Rounds: rounds}
	var cands [2]*redlock.Client
	for i := range cands {
		c, err := cluster.Client()
		if err != nil {
			return res, err
		}
		defer c.Close()
		cands[i] = c
	}
	const name = "timings"
	var reads, handoffs, failovers, overshoots []time.Duration
	for r := range rounds {
		a, b := cands[r%2], cands[(r+1)%2]
		for _, crash := range []bool{false, true} {
			actx, crashA := context.WithCancel(ctx)
			la, err := a.Campaign(actx, name, "a", ttl)
			if err != nil {
				crashA()
				return res, err
			}
			start := time.Now()
			if _, err := a.Leader(ctx, name); err != nil {
				crashA()
				return res, err
			}
			reads = append(reads, time.Since(start))
			elected := make(chan *redlock.Leadership, 1)
			errc := make(chan error, 1)
			go func() {
				lb, err := b.Campaign(ctx, name, "b", ttl)
				if err != nil {
					errc <- err
					return
				}
				elected <- lb
			}()
			// Let b fail its first attempt and wait, subscribed; crash at
			// a point of the extension interval that varies by round.
			time.Sleep(ttl/10 + time.Duration(r%5)*ttl/20)
			var t0 time.Time
			if crash {
				t0 = time.Now()
				crashA()
			} else {
				t0 = time.Now()
				_ = la.Resign(ctx)
			}
			var lb *redlock.Leadership
			select {
			case lb = <-elected:
			case err := <-errc:
				crashA()
				return res, err
			}
			t1 := time.Now()
			if crash {
				failovers = append(failovers, t1.Sub(t0))
				last := la.Lease().Lock()
				expiry := last.ValidUntil().Add(res.Drift) // attempt start + TTL
				overshoots = append(overshoots, t1.Sub(expiry))
				_ = la.Resign(ctx) // owner-checked: touches nothing of b's
			} else {
				handoffs = append(handoffs, t1.Sub(t0))
			}
			crashA()
			_ = lb.Resign(ctx)
		}
	}
	res.RoundTrip = oracle.Percentile(reads, 50)
	res.HandoffP50, res.HandoffMax = oracle.Percentile(handoffs, 50), oracle.Percentile(handoffs, 100)
	res.FailoverP50, res.FailoverMax = oracle.Percentile(failovers, 50), oracle.Percentile(failovers, 100)
	res.OvershootP50, res.OvershootMax = oracle.Percentile(overshoots, 50), oracle.Percentile(overshoots, 100)
	return res, nil
}
