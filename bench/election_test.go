package bench

import (
	"context"
	"testing"
	"time"

	"github.com/d3b93e30/redlock/chaos"
)

// BenchmarkElection measures leader election on 5 redis-server nodes
// (chaos.MeasureElection): the gap from a leader's resign to the next
// leader, and from a leader's crash (its extensions stop) to the next
// leader, with a 1 s TTL and the library's default retry policy. b.N is
// the number of rounds (at least 5); each round measures one hand-off and
// one crash failover.
func BenchmarkElection(b *testing.B) {
	ctx := context.Background()
	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Backend: chaos.RedisServer, Nodes: 5})
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Close()
	rounds := max(b.N, 5)
	b.ResetTimer()
	t, err := chaos.MeasureElection(ctx, cluster, time.Second, rounds)
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	b.Log("\n" + t.String())
	b.ReportMetric(ms(t.RoundTrip), "read-ms")
	b.ReportMetric(ms(t.HandoffP50), "handoff-p50-ms")
	b.ReportMetric(ms(t.HandoffMax), "handoff-max-ms")
	b.ReportMetric(ms(t.FailoverP50), "failover-p50-ms")
	b.ReportMetric(ms(t.OvershootP50), "past-expiry-p50-ms")
	b.ReportMetric(ms(t.OvershootMax), "past-expiry-max-ms")
}
