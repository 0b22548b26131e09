package redlockgocron_test

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-co-op/gocron/v2"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockgocron"
)

// Three replicas, one run per tick: the same job is scheduled every 500 ms
// on three replicas started 50 ms apart (in a service: one per host, each
// with the same code), and each tick runs on one of them. Without the
// Locker's minimum hold every tick would run three times, since the job
// ends before the next replica's tick fires.
func Example_threeReplicas() {
	var urls []string
	for range 3 { // three in-memory Redis nodes for the example: use your masters
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			log.Fatal(err)
		}
		defer m.Close()
		m.ClockTTL(true) // keys expire on the wall clock, as on a Redis server
		urls = append(urls, "redis://"+m.Addr())
	}

	var runs atomic.Int32
	var schedulers []gocron.Scheduler
	for range 3 { // on every replica:
		client, err := redlock.Dial(urls)
		if err != nil {
			log.Fatal(err)
		}
		defer client.Close()
		locker, err := redlockgocron.NewLocker(client)
		if err != nil {
			log.Fatal(err)
		}
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
		if err != nil {
			log.Fatal(err)
		}
		locker.Attach(s) // each tick's lock holds for half the job's interval
		_, err = s.NewJob(gocron.DurationJob(500*time.Millisecond), gocron.NewTask(func() {
			token := locker.Lease("report").Lock().Token() // pass it to the storage the job writes
			_ = token
			runs.Add(1)
		}), gocron.WithName("report"))
		if err != nil {
			log.Fatal(err)
		}
		s.Start()
		schedulers = append(schedulers, s)
		time.Sleep(50 * time.Millisecond) // the replicas start apart
	}
	time.Sleep(3*500*time.Millisecond + 250*time.Millisecond - 3*50*time.Millisecond) // three ticks
	for _, s := range schedulers {
		if err := s.Shutdown(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(runs.Load(), "runs in 3 ticks on 3 replicas")
	// Output: 3 runs in 3 ticks on 3 replicas
}

// The Elector: only the replica that holds the leadership runs jobs, and
// its fencing token is the term's. Close gives the leadership up.
func ExampleElector() {
	var client *redlock.Client // redlock.Dial(urls) on every replica
	elector, err := redlockgocron.NewElector(client)
	if err != nil {
		log.Fatal(err)
	}
	defer elector.Close(context.Background()) // after the scheduler's Shutdown
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		log.Fatal(err)
	}
	_, err = s.NewJob(gocron.DurationJob(time.Minute), gocron.NewTask(func() {
		if lease := elector.Lease(); lease != nil {
			_ = lease.Lock().Token() // the leader's term: pass it to the storage the job writes
		}
	}), gocron.WithName("report"), gocron.WithSingletonMode(gocron.LimitModeReschedule))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	defer s.Shutdown()
}
