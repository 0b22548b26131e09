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
// run under DoRead, the rebuild under DoWrite; the cache checks every
// token with a fencing.RWRegister (docs/fencing.md): a reader's token is
// the last writer's, so a read that raced a newer rebuild is refused, as
// is the rebuild of a writer that paused past its lock.
func ExampleRWMutex_DoWrite() {
	client, stop := dialNodes(3)
	defer stop()
	rw, err := client.RWMutex("cache")
	if err != nil {
		log.Fatal(err)
	}
	var (
		cache   fencing.RWRegister // the cache's check of tokens
		version atomic.Int32
		reading atomic.Int32
		all     = make(chan struct{}) // closed once every reader reads
		wg      sync.WaitGroup
	)
	rebuild := func() {
		err := rw.DoWrite(context.Background(), 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
			if err := cache.CheckWrite(lease.Token()); err != nil {
				return err // a stale writer
			}
			if reading.Load() != 0 {
				return fmt.Errorf("a reader is reading during the rebuild")
			}
			version.Add(1) // ... rebuild the cache ...
			return nil
		})
		if err != nil {
			log.Fatal(err)
		}
	}
	rebuild()
	for range 6 { // 6 readers at once
		wg.Go(func() {
			err := rw.DoRead(context.Background(), 10*time.Second, func(ctx context.Context, lease *redlock.Lease) error {
				if err := cache.CheckRead(lease.Token()); err != nil {
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
