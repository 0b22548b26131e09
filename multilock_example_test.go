package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
)

// A transfer between two accounts locks both accounts at once: every node
// sets both keys or neither, so two transfers between the same accounts in
// opposite directions never deadlock. Each account's store checks its own
// key's fencing token. A rival that needs one of the accounts is told which
// key is held, on which nodes, by whom.
func ExampleClient_AcquireMulti() {
	var nodes []redis.UniversalClient
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		m.ClockTTL(true)
		rdb := redlock.NewNodeClient(m.Addr(), nil)
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	client, err := redlock.New(nodes, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	ctx := context.Background()

	// One hash tag ({accounts}) keeps the keys in one slot, which a Redis
	// Cluster node needs; independent masters need none.
	from, to := "{accounts}:alice", "{accounts}:bob"
	transfer, err := client.AcquireMulti(ctx, []string{from, to}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fromToken, _ := transfer.Token(from)
	toToken, _ := transfer.Token(to)
	fmt.Println("holding", transfer.Keys(), "with a token each:", fromToken > 0 && toToken > 0)

	// A transfer the other way round waits; TryAcquireMulti says at once
	// which key is held.
	_, err = client.TryAcquireMulti(ctx, []string{to, "{accounts}:carol"}, 10*time.Second)
	var taken *redlock.KeysTakenError
	if errors.As(err, &taken) {
		k := taken.Keys[0]
		fmt.Println("held elsewhere:", k.Key, "by the transfer:", k.Holders[0].Holder == transfer.Owner()[:8])
	}

	// ... debit alice with fromToken, credit bob with toToken ...

	if err := transfer.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// holding [{accounts}:alice {accounts}:bob] with a token each: true
	// held elsewhere: {accounts}:bob by the transfer: true
}

// DoMulti holds several keys while a function runs, as Do holds one: it
// takes them all or none, extends them all in the background, and releases
// them when the function returns. The Lease's context ends the moment the
// keys can no longer be trusted; lease.MultiLock gives each key's fencing
// token for that key's store.
func ExampleClient_DoMulti() {
	client, stop := dialNodes(3)
	defer stop()
	ctx := context.Background()

	from, to := "{accounts}:alice", "{accounts}:bob"
	err := client.DoMulti(ctx, []string{from, to}, 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
		transfer := lease.MultiLock()
		fromToken, _ := transfer.Token(from)
		toToken, _ := transfer.Token(to)
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx) // the keys were lost: stop
		}
		fmt.Println("debit and credit, each with its key's token:", fromToken > 0 && toToken > 0)
		return nil // ... debit alice with fromToken, credit bob with toToken ...
	})
	fmt.Println("done:", err)

	// Released: the next transfer takes both keys at once.
	next, err := client.TryAcquireMulti(ctx, []string{to, from}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	_ = next.Release(ctx)
	fmt.Println("released")
	// Output:
	// debit and credit, each with its key's token: true
	// done: <nil>
	// released
}
