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
	"github.com/d3b93e30/redlock/fencing"
)

// Leader election: host-a is elected, host-b waits with Lead (which would
// campaign again after a loss instead of exiting), a watcher follows the
// changes. host-a's resign hands over at once; the store checks every
// write's term, so host-a's late write after the hand-off is refused.
func ExampleClient_Lead() {
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
	replica := func() *redlock.Client {
		c, err := redlock.New(nodes, redlock.WithNodeTimeout(time.Second))
		if err != nil {
			log.Fatal(err)
		}
		return c
	}
	a, b, watcher := replica(), replica(), replica()
	defer a.Close()
	defer b.Close()
	defer watcher.Close()

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var store fencing.Register // the resource the leader writes: it checks terms

	// Watch first, so that no change is missed.
	changes, err := watcher.WatchLeader(ctx, "scheduler", time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader at first: %q\n", (<-changes).Identity)

	la, err := a.Campaign(ctx, "scheduler", "host-a", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("leader: %q\n", (<-changes).Identity)
	_ = store.Check(la.Term()) // host-a's writes carry its term

	// host-b runs its work with Lead: it waits while host-a leads, and
	// would campaign again after a loss instead of exiting.
	done := make(chan error)
	go func() {
		done <- b.Lead(ctx, "scheduler", "host-b", 10*time.Second, func(ctx context.Context, l *redlock.Leadership) error {
			fmt.Println("host-b elected, term above host-a's:", l.Term() > la.Term())
			return store.Check(l.Term()) // then done: Lead resigns
		})
	}()
	time.Sleep(100 * time.Millisecond)     // host-b is waiting
	if err := la.Resign(ctx); err != nil { // hands over at once, not after the TTL
		log.Fatal(err)
	}
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// A deposed leader's late write is refused by the store.
	fmt.Println("host-a's late write refused:", errors.Is(store.Check(la.Term()), fencing.ErrStale))
	stop()
	for range changes { // closed once ctx has ended
	}
	// Output:
	// leader at first: ""
	// leader: "host-a"
	// host-b elected, term above host-a's: true
	// host-a's late write refused: true
}
