package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
)

// A rate-limited API may be called by at most 3 workers at once, across
// every process. Each worker runs its call under a permit of the semaphore
// "partner-api" with Semaphore.Do: the permit is extended while the call
// runs, and the call's context ends if the permit is lost. The fencing
// token is per permit: a resource that checks tokens keeps one high-water
// mark per permit key (lease.Key()).
func ExampleSemaphore_Do() {
	client, stop := dialNodes(3)
	defer stop()
	sem, err := client.Semaphore("partner-api", 3)
	if err != nil {
		log.Fatal(err)
	}
	var (
		mu      sync.Mutex
		regs    = map[string]*fencing.Register{} // the API's check of each permit's tokens
		calling atomic.Int32
		most    atomic.Int32
		wg      sync.WaitGroup
	)
	for range 8 { // 8 workers, at most 3 calling at a time
		wg.Go(func() {
			err := sem.Do(context.Background(), 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
				mu.Lock()
				g := regs[lease.Key()]
				if g == nil {
					g = new(fencing.Register)
					regs[lease.Key()] = g
				}
				mu.Unlock()
				return g.Do(lease.Token(), func() error {
					n := calling.Add(1)
					defer calling.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(20 * time.Millisecond) // ... call the API ...
					return nil
				})
			})
			if err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("at most 3 calls at once:", most.Load() <= 3)

	// All permits taken: TryAcquire says so with ErrTaken. (Acquire waits
	// for the workers' last clean-ups, which may still run in the background.)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var held []*redlock.Permit
	for range 3 {
		p, err := sem.Acquire(ctx, 10*time.Second)
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, p)
	}
	_, err = sem.TryAcquire(ctx, 10*time.Second)
	fmt.Println("fourth permit:", errors.Is(err, redlock.ErrTaken))
	for _, p := range held {
		_ = p.Release(ctx)
	}
	// Output:
	// at most 3 calls at once: true
	// fourth permit: true
}
