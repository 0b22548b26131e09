package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
)

// Five independent Redis masters (here in-process miniredis nodes), one lock
// on a majority of them. The fencing token grows with every new holder: pass
// it to the resource the lock protects, so that it can refuse a stale
// holder's writes.
func ExampleClient_Acquire() {
	var nodes []redis.UniversalClient
	for range 5 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		// Keys expire on the wall clock, as on a Redis server.
		m.ClockTTL(true)
		rdb := redlock.NewNodeClient(m.Addr(), nil) // no command retries, context timeouts honoured
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	// The clients stay ours: Close leaves them open. The per-node timeout
	// (default: 1% of the TTL) leaves room for a busy test machine.
	client, err := redlock.New(nodes, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	ctx := context.Background()
	lock, err := client.Acquire(ctx, "report:acme", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("acquired %s on a majority of %d nodes\n", lock.Key(), len(client.Nodes()))
	fmt.Println("valid for less than the TTL:", lock.Validity() > 0 && lock.Validity() < 10*time.Second)

	// ... build the report, handing lock.Token() to the report store ...

	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	next, err := client.Acquire(ctx, "report:acme", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	// Tokens start from a node's clock in microseconds: only their order
	// means something.
	fmt.Println("next holder's token is higher:", next.Token() > lock.Token())
	// Output:
	// acquired report:acme on a majority of 5 nodes
	// valid for less than the TTL: true
	// next holder's token is higher: true
}

// Dial connects to the nodes itself, one URL per node ("rediss://" for TLS,
// "redis://user:password@host:port/db" for an ACL user), with settings that
// suit Redlock; Close closes those connections.
func ExampleDial() {
	var (
		nodes []*miniredis.Miniredis
		urls  []string
	)
	for range 3 {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		m.ClockTTL(true) // keys expire on the wall clock, as on a Redis server
		nodes = append(nodes, m)
		urls = append(urls, "redis://"+m.Addr())
	}

	client, err := redlock.Dial(urls, redlock.WithKeyPrefix("lock:"))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	fmt.Printf("%d nodes, quorum %d\n", len(client.Nodes()), client.Quorum())

	ctx := context.Background()
	lock, err := client.TryAcquire(ctx, "invoice-42", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	held := 0
	for _, m := range nodes {
		if m.Exists("lock:invoice-42") { // the prefix is added on the nodes
			held++
		}
	}
	fmt.Println("lock:invoice-42 set on a majority:", held >= client.Quorum())
	if err := lock.Release(ctx); err != nil {
		log.Fatal(err)
	}

	// Bad input is refused before anything is dialed.
	_, err = redlock.Dial([]string{urls[0], urls[0]})
	fmt.Println("same node twice is invalid:", errors.Is(err, redlock.ErrInvalidArgument))
	// Output:
	// 3 nodes, quorum 2
	// lock:invoice-42 set on a majority: true
	// same node twice is invalid: true
}

// Extend returns a new Lock with a fresh validity; the old handle keeps its
// own. A lock that is no longer held is never revived.
func ExampleLock_Extend() {
	client, stop := dialNodes(3)
	defer stop()

	ctx := context.Background()
	lock, err := client.Acquire(ctx, "nightly-batch", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	longer, err := lock.Extend(ctx, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("TTL:", longer.TTL(), "(the old handle still says", lock.TTL().String()+")")
	fmt.Println("validity grew:", longer.Validity() > lock.Validity())
	fmt.Println("same fencing token:", longer.Token() == lock.Token())

	if err := longer.Release(ctx); err != nil {
		log.Fatal(err)
	}
	_, err = longer.Extend(ctx, 30*time.Second)
	fmt.Println("extend after release:", errors.Is(err, redlock.ErrNotHeld))
	// Output:
	// TTL: 30s (the old handle still says 5s)
	// validity grew: true
	// same fencing token: true
	// extend after release: true
}

// TryAcquire makes one attempt. When the lock is held elsewhere the error
// matches ErrNotAcquired, and a *QuorumError tells what each node answered.
// Redlock decides as soon as a majority is out of reach: nodes whose answer
// was not needed show "pending". Here another owner holds the key on nodes 0
// to 2, and nodes 3 and 4 hang (a stand-in for a paused Redis).
func ExampleClient_TryAcquire() {
	var nodes []redis.UniversalClient
	for i := range 5 {
		var addr string
		if i < 3 {
			m, err := miniredis.Run()
			if err != nil {
				log.Fatal(err)
			}
			defer m.Close()
			m.ClockTTL(true) // keys expire on the wall clock, as on a Redis server
			if err := m.Set("report:acme", "another-owner"); err != nil {
				log.Fatal(err)
			}
			m.SetTTL("report:acme", 10*time.Second)
			addr = m.Addr()
		} else {
			// Accepts connections (the kernel does) but never answers.
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				log.Fatal(err)
			}
			defer ln.Close()
			addr = ln.Addr().String()
		}
		rdb := redlock.NewNodeClient(addr, nil)
		defer rdb.Close()
		nodes = append(nodes, rdb)
	}
	client, err := redlock.New(nodes, redlock.WithNodeTimeout(300*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	_, err = client.TryAcquire(context.Background(), "report:acme", 10*time.Second)
	fmt.Println("not acquired:", errors.Is(err, redlock.ErrNotAcquired))
	var qe *redlock.QuorumError
	if errors.As(err, &qe) {
		fmt.Printf("%s %q: granted by %d of %d nodes, %d needed\n", qe.Op, qe.Key, qe.Granted, len(qe.Nodes), qe.Quorum)
		for i, n := range qe.Nodes {
			fmt.Printf("node %d: %s\n", i, n.Outcome)
		}
	}
	// Output:
	// not acquired: true
	// acquire "report:acme": granted by 0 of 5 nodes, 3 needed
	// node 0: taken
	// node 1: taken
	// node 2: taken
	// node 3: pending
	// node 4: pending
}

// dialNodes starts n in-process Redis servers (miniredis) for the examples
// and dials them as ExampleDial does. stop closes the Client, then the
// servers.
func dialNodes(n int) (client *redlock.Client, stop func()) {
	var (
		nodes []*miniredis.Miniredis
		urls  []string
	)
	for range n {
		m, err := miniredis.Run()
		if err != nil {
			log.Fatal(err)
		}
		m.ClockTTL(true) // keys expire on the wall clock, as on a Redis server
		nodes = append(nodes, m)
		urls = append(urls, "redis://"+m.Addr())
	}
	// The per-node timeout (default: 1% of the TTL, 100 ms for the 10 s
	// locks here) leaves room for a busy test machine, where a node that
	// times out would fail an attempt or an extension and change the output.
	client, err := redlock.Dial(urls, redlock.WithNodeTimeout(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	return client, func() {
		_ = client.Close()
		for _, m := range nodes {
			m.Close()
		}
	}
}

// Do holds the lock while a function runs: it acquires the lock, extends it
// in the background (every TTL/3 by default), and releases it when the
// function returns. The function gets the Lease: its context ends the moment
// the lock can no longer be trusted (pass it to everything the work does;
// context.Cause, or lease.Err, says why), its validity follows every
// extension, and its fencing token goes with every write, so that the store
// refuses a stale holder's (here a fencing.Register). When Do returns, the lock
// is released and nothing Do started is still running.
func ExampleClient_Do() {
	client, stop := dialNodes(3)
	defer stop()

	var store fencing.Register // the report store's check of the tokens
	ctx := context.Background()
	var token uint64
	err := client.Do(ctx, "report:acme", 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
		first := lease.ValidUntil()
		// Steps of work, each stopping if the lock is lost: three, or more
		// until the lease has extended the lock once (on a busy machine an
		// extension may take longer than three steps).
		for step := 0; step < 3 || !lease.ValidUntil().After(first); step++ {
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(100 * time.Millisecond):
			}
		}
		fmt.Println("extended while working:", lease.ValidUntil().After(first), lease.Validity() > 0)
		token = lease.Token()
		return store.Do(token, func() error {
			return nil // ... save the report ...
		})
	}, redlock.WithRetry(redlock.NoRetry()), // one attempt: a busy report is left to its holder
		redlock.WithExtendInterval(50*time.Millisecond)) // to see extensions here
	if errors.Is(err, redlock.ErrTaken) {
		fmt.Println("another worker has it")
		return
	}
	fmt.Println("done:", err)

	// Released: the next holder gets it at once, with a greater token.
	next, err := client.TryAcquire(ctx, "report:acme", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Tokens start from a node's clock in microseconds: only their order
	// carries meaning.
	fmt.Println("next token is greater:", next.Token() > token)
	if err := store.Check(next.Token()); err != nil { // the new holder writes
		log.Fatal(err)
	}
	_ = next.Release(ctx)
	// A write still carrying the old token (a paused first holder) is refused.
	fmt.Println("stale write refused:", errors.Is(store.Check(token), fencing.ErrStale))
	// Output:
	// extended while working: true true
	// done: <nil>
	// next token is greater: true
	// stale write refused: true
}

// KeepAlive keeps a lock you acquired yourself alive in the background. Its
// context ends when an extension fails or the validity runs out first; Err
// says why. Release stops the extensions and releases the lock.
func ExampleLock_KeepAlive() {
	client, stop := dialNodes(3)
	defer stop()

	ctx := context.Background()
	lock, err := client.Acquire(ctx, "import", 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// Extend every 50 ms (the default is every TTL/3), to see it here.
	lease, err := lock.KeepAlive(ctx, redlock.WithExtendInterval(50*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	// Steps of work: three, or more until the lease has extended the lock
	// once (on a busy machine an extension may take longer than three steps).
	for step := 0; step < 3 || !lease.Lock().ValidUntil().After(lock.ValidUntil()); step++ {
		select {
		case <-lease.Done():
			fmt.Println("lock lost, stopping:", lease.Err())
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	fmt.Println("extended while working:", lease.Lock().ValidUntil().After(lock.ValidUntil()))

	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("lease ended by Release:", errors.Is(lease.Err(), context.Canceled))
	fmt.Println("validity left after release:", lease.Lock().Validity() > 0)
	// Output:
	// extended while working: true
	// lease ended by Release: true
	// validity left after release: false
}

// A function that takes the lock itself can run on its own or inside Do on
// the same key. Under Do, Acquire with Do's context (or one derived from it)
// returns a nested handle on the lock already held, at once, instead of
// waiting for its own holder until the TTL; releasing that handle leaves the
// lock to the outermost holder. Any other context contends as usual.
func ExampleClient_Acquire_reentrant() {
	client, stop := dialNodes(3)
	defer stop()

	var last uint64 // the token of the last rebuild
	rebuild := func(ctx context.Context) error {
		lock, err := client.Acquire(ctx, "index", 10*time.Second)
		if err != nil {
			return err
		}
		defer lock.Release(ctx)
		fmt.Printf("rebuilding, token greater than the last: %v (nested: %v)\n", lock.Token() > last, lock.Attempts() == 0)
		last = lock.Token()
		return nil
	}

	ctx := context.Background()
	if err := rebuild(ctx); err != nil { // on its own: takes the lock
		log.Fatal(err)
	}
	err := client.Do(ctx, "index", 10*time.Second, func(ctx context.Context, _ *redlock.Lease) error {
		if err := rebuild(ctx); err != nil { // under Do: uses Do's lock
			return err
		}
		states, err := client.Inspect(ctx, "index")
		if err != nil {
			return err
		}
		held := 0
		for _, s := range states {
			if s.Held {
				held++
			}
		}
		fmt.Println("still held after the nested release:", held >= client.Quorum())
		_, err = client.TryAcquire(context.Background(), "index", 10*time.Second)
		fmt.Println("another context must wait:", errors.Is(err, redlock.ErrNotAcquired))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// rebuilding, token greater than the last: true (nested: false)
	// rebuilding, token greater than the last: true (nested: true)
	// still held after the nested release: true
	// another context must wait: true
}
