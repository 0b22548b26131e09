package redlock_test

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
)

// A cache is read by many workers at once and rebuilt by one alone. Readers
// run under DoRead, the rebuild under DoWrite; the resource checks every
// token, reads and writes alike, against the highest it has seen
// (docs/fencing.md): a reader's token is the last writer's, so a read that
// raced a newer rebuild is refused, as is a stale writer's rebuild.
func ExampleRWMutex_DoWrite() {
	client, stop := dialNodes(3)
	defer stop()
	rw, err := client.RWMutex("cache")
	if err != nil {
		log.Fatal(err)
	}
	var (
		cache   fencing.Register // the cache's check of tokens
		version atomic.Int32
		reading atomic.Int32
		all     = make(chan struct{}) // closed once every reader reads
		wg      sync.WaitGroup
	)
	rebuild := func() {
		err := rw.DoWrite(context.Background(), 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			return cache.Do(lease.Token(), func() error {
				if reading.Load() != 0 {
					return fmt.Errorf("a reader is reading during the rebuild")
				}
				version.Add(1) // ... rebuild the cache ...
				return nil
			})
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	rebuild()
	for range 6 { // 6 readers at once
		wg.Go(func() {
			err := rw.DoRead(context.Background(), 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
				if err := cache.Check(lease.Token()); err != nil {
					return err // a newer rebuild happened: this read is stale
				}
				if reading.Add(1) == 6 {
					close(all)
				}
				<-all // ... read the cache, all 6 at once ...
				reading.Add(-1)
				return nil
			})
			if err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	rebuild()
	fmt.Println("rebuilds:", version.Load())
	// Output: rebuilds: 2
}
