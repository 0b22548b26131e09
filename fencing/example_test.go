package fencing_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
)

// Two holders of one lock in sequence. The first pauses past its lock (a long
// GC pause, say), the lock passes to the second, and the first then writes as
// if it still held it. The resource checks the fencing tokens and refuses the
// late write. The lock's three nodes run in memory here (miniredis), and the
// pause is simulated by moving their clocks past the TTL.
func Example() {
	ctx := context.Background()
	var (
		servers []*miniredis.Miniredis
		nodes   []redis.UniversalClient
	)
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			panic(err)
		}
		defer m.Close()
		m.ClockTTL(true) // keys expire on the wall clock, as on a Redis server
		rc := redlock.NewNodeClient(m.Addr(), nil)
		defer rc.Close()
		servers, nodes = append(servers, m), append(nodes, rc)
	}
	// A generous per-node timeout, so that the example also passes on a
	// loaded machine; the default is 1% of the TTL (at least 100 ms).
	locks, err := redlock.New(nodes, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	var report fencing.Register // the resource, with the fence in front of it
	body := ""
	write := func(l *redlock.Lock, text string) error {
		return report.Do(l.Token(), func() error { body = text; return nil })
	}

	a, err := locks.TryAcquire(ctx, "report:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	// A works for a moment, then pauses for longer than the TTL: its key
	// expires on every node.
	time.Sleep(50 * time.Millisecond)
	for _, m := range servers {
		m.FastForward(11 * time.Second)
	}

	b, err := locks.TryAcquire(ctx, "report:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	fmt.Println("B's token is higher:", b.Token() > a.Token())
	fmt.Println("B writes:", write(b, "B's report"))

	err = write(a, "A's report") // A wakes up and writes
	var stale *fencing.StaleError
	fmt.Println("A's write is stale:", errors.Is(err, fencing.ErrStale))
	fmt.Println("refused in favour of B's token:", errors.As(err, &stale) && stale.Highest == b.Token())
	fmt.Println("the report is", body)
	_ = b.Release(ctx)

	// Output:
	// B's token is higher: true
	// B writes: <nil>
	// A's write is stale: true
	// refused in favour of B's token: true
	// the report is B's report
}

// Kleppmann's example: the storage has accepted token 34, so a write with
// token 33 is refused.
func ExampleRegister() {
	var g fencing.Register
	fmt.Println(g.Check(33))
	fmt.Println(g.Check(34))
	fmt.Println(g.Check(34)) // the same holder again
	err := g.Check(33)
	fmt.Println(err)
	fmt.Println(errors.Is(err, fencing.ErrStale))
	// Output:
	// <nil>
	// <nil>
	// <nil>
	// fencing: stale token 33: the resource has already accepted token 34
	// true
}

// A value kept in Redis: the token is stored with it, and a script compares
// and writes in one atomic step.
func ExampleSetIfNewer() {
	ctx := context.Background()
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer m.Close()
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()

	fmt.Println(fencing.SetIfNewer(ctx, rdb, "report:42", 34, "B's report"))
	err = fencing.SetIfNewer(ctx, rdb, "report:42", 33, "A's late report")
	var stale *fencing.StaleError
	if errors.As(err, &stale) {
		fmt.Printf("refused token %d: already at %d\n", stale.Token, stale.Highest)
	}
	value, token, err := fencing.GetWithToken(ctx, rdb, "report:42")
	fmt.Println(value, token, err)

	_, _, err = fencing.GetWithToken(ctx, rdb, "report:43")
	fmt.Println(err == redis.Nil)
	// Output:
	// <nil>
	// refused token 33: already at 34
	// B's report 34 <nil>
	// true
}
