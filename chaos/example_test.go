package chaos_test

import (
	"context"
	"fmt"
	"time"

	"github.com/d3b93e30/redlock/chaos"
)

// A scenario is data: what the clients do, which faults hit which nodes and
// when, and the verdict a correct lock must get, with the reason. Here two
// clients take turns on one key while node 0 of 3 is cut off for the first
// half of each trial; the other two nodes are a majority, so the lock must
// stay safe. Run heals and empties the cluster before each trial.
func ExampleScenario() {
	ctx := context.Background()
	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Nodes: 3}) // in-process nodes
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()

	s := chaos.Scenario{
		Name:    "one-node-cut-off",
		Summary: "2 clients take turns on one key while node 0 is cut off for 300 ms",
		Expect:  chaos.Safe,
		Why:     "the two other nodes are a majority: they grant and refuse the lock on their own",
		Workload: chaos.Workload{
			Clients: 2,
			TTL:     time.Second,
			Hold:    5 * time.Millisecond, // each hold writes to the plain and the fenced resource
			Gap:     2 * time.Millisecond,
		},
		Faults: []chaos.Fault{{
			At:     0, // before any client starts
			Nodes:  chaos.NodeSet{Pick: chaos.PickFixed, Nodes: []int{0}},
			Action: chaos.ActionPartition,
			For:    300 * time.Millisecond, // then healed
		}},
		Duration: 600 * time.Millisecond, // one trial
	}
	res, err := chaos.Run(ctx, cluster, s, 2, 1, nil) // 2 trials, seed 1
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%s: expected %s, observed %s (%d trials, %d violations)\n",
		res.Scenario, res.Expect, res.Observed, res.Trials, res.Violations)
	// Output: one-node-cut-off: expected safe, observed safe (2 trials, 0 violations)
}
