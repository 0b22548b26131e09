package redlockgocron_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/redlockgocron"
)

// inProcess runs sc in a bubble on three in-memory nodes and three replicas.
func inProcess(t *testing.T, sc scenario, test func(t *testing.T, nodes []*testNode, t0 time.Time, runs []run)) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newNodes(t, 3)
		var clients []*redlock.Client
		for range sc.starts {
			clients = append(clients, newReplica(t, nodes))
		}
		t0, runs := sc.replicas(t, clients)
		test(t, nodes, t0, runs)
	})
}

// The problem the minimum hold solves, as found with three gocron replicas
// started 150 ms apart and a 50 ms job every second: released when the job
// ends, the lock is free again before the next replica's tick fires, and
// every tick runs on every replica.
func TestLocker_WithoutHoldEveryReplicaRunsEveryTick(t *testing.T) {
	sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 11,
		starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond},
		opts:   []redlockgocron.Option{redlockgocron.WithMinHold(0)}}
	inProcess(t, sc, func(t *testing.T, _ []*testNode, t0 time.Time, runs []run) {
		assert.Len(t, runs, 33)
		assert.Equal(t, []int{3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3}, sc.perTick(t, t0, runs))
	})
}

// With the hold derived from the interval (half of it), every tick runs
// exactly once, whichever replica starts first and however far apart they
// start within the hold; the runs hold increasing fencing tokens.
func TestLocker_OneRunPerTick(t *testing.T) {
	for name, starts := range map[string][]time.Duration{
		"150 ms apart":         {0, 150 * time.Millisecond, 300 * time.Millisecond},
		"last first":           {300 * time.Millisecond, 150 * time.Millisecond, 0},
		"skew just below hold": {0, 490 * time.Millisecond, 20 * time.Millisecond},
		"together":             {0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 11, starts: starts}
			inProcess(t, sc, func(t *testing.T, _ []*testNode, t0 time.Time, runs []run) {
				assert.Equal(t, ones(11), sc.perTick(t, t0, runs))
				requireOneAtATime(t, runs, false)
			})
		})
	}
}

// A job longer than its interval (and than the lock's TTL) is never run
// twice at once: the lock is kept alive while it runs, the ticks that fire
// meanwhile find it taken on every replica and are skipped, not queued, and
// the first tick after it ended runs.
func TestLocker_LongJobNeverRunsTwiceAtOnce(t *testing.T) {
	sc := scenario{interval: time.Second, work: 2400 * time.Millisecond, ticks: 9,
		starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond},
		opts:   []redlockgocron.Option{redlockgocron.WithTTL(time.Second)}}
	inProcess(t, sc, func(t *testing.T, _ []*testNode, t0 time.Time, runs []run) {
		requireOneAtATime(t, runs, false)
		// Ticks 1, 4 and 7 run: each run ends 2.4 s later, before the
		// third tick after it.
		assert.Equal(t, []int{1, 0, 0, 1, 0, 0, 1, 0, 0}, sc.perTick(t, t0, runs))
	})
}

// A node killed while a run holds the lock changes nothing: the lock is
// kept alive and released on the other two, and every tick still runs once,
// for short jobs and for jobs longer than the interval.
func TestLocker_NodeKilledMidRun(t *testing.T) {
	for _, work := range []time.Duration{50 * time.Millisecond, 2400 * time.Millisecond} {
		t.Run(work.String(), func(t *testing.T) {
			var killedAt time.Time
			var nodes []*testNode
			sc := scenario{interval: time.Second, work: work, ticks: 9,
				starts: []time.Duration{0, 150 * time.Millisecond, 300 * time.Millisecond},
				opts:   []redlockgocron.Option{redlockgocron.WithTTL(time.Second)}}
			sc.during = func(t0 time.Time) {
				time.Sleep(time.Until(t0.Add(4*time.Second + 20*time.Millisecond))) // tick 4's run
				killedAt = time.Now()
				nodes[1].Kill()
			}
			synctest.Test(t, func(t *testing.T) {
				nodes = newNodes(t, 3)
				clients := []*redlock.Client{newReplica(t, nodes), newReplica(t, nodes), newReplica(t, nodes)}
				t0, runs := sc.replicas(t, clients)
				requireOneAtATime(t, runs, false)
				counts := sc.perTick(t, t0, runs)
				if work < sc.interval {
					assert.Equal(t, ones(9), counts)
				} else {
					assert.Equal(t, []int{1, 0, 0, 1, 0, 0, 1, 0, 0}, counts)
				}
				var during bool
				for _, r := range runs {
					during = during || (r.start.Before(killedAt) && r.end.After(killedAt))
				}
				assert.True(t, during, "a run was under way when the node was killed")
			})
		})
	}
}

// The tolerance is the hold: a replica whose tick fires more than half an
// interval after the first one's finds the first tick's lock free again and
// runs that tick a second time (the documented limit). Its run then holds
// the lock past the first replica's next tick, so it runs every later tick.
func TestLocker_SkewBeyondTheHoldRunsATickTwice(t *testing.T) {
	sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 5,
		starts: []time.Duration{0, 600 * time.Millisecond}}
	inProcess(t, sc, func(t *testing.T, _ []*testNode, t0 time.Time, runs []run) {
		require.Len(t, runs, 5) // the later replica's fifth tick comes after the end
		assert.Equal(t, []int{0, 1, 1, 1, 1}, []int{runs[0].replica, runs[1].replica, runs[2].replica, runs[3].replica, runs[4].replica})
		assert.Equal(t, 1, sc.tick(t0, runs[0]))
		assert.Equal(t, 1, sc.tick(t0, runs[1]), "the first tick runs twice")
	})
}

// requireTakenUntil requires the named job's lock to be taken for another
// replica's Locker 1 ms before end and free 1 ms after (fake time).
func requireTakenUntil(t *testing.T, other *redlockgocron.Locker, job string, end time.Time) {
	t.Helper()
	ctx := context.Background()
	time.Sleep(time.Until(end) - time.Millisecond)
	_, err := other.Lock(ctx, job)
	require.ErrorIs(t, err, redlock.ErrTaken, "1 ms before the end of the hold")
	time.Sleep(2 * time.Millisecond)
	l, err := other.Lock(ctx, job)
	require.NoError(t, err, "1 ms after the end of the hold")
	require.NoError(t, l.Unlock(ctx))
}

// With an attached scheduler, a job's hold is half its interval, read from
// its next runs: a cron job every 2 s holds 1 s, a duration job every 10 s
// holds 5 s, a job with no next run (one-time) holds for the TTL. Unlock
// returns at once.
func TestLocker_HoldIsHalfTheInterval(t *testing.T) {
	for _, tc := range []struct {
		job  string
		def  gocron.JobDefinition
		hold time.Duration
	}{
		{"cron", gocron.CronJob("*/2 * * * * *", true), time.Second},
		{"duration", gocron.DurationJob(10 * time.Second), 5 * time.Second},
		{"one-time", gocron.OneTimeJob(gocron.OneTimeJobStartDateTime(time.Now().Add(time.Hour))), 3 * time.Second},
		{"weekly: at most 5 minutes", gocron.WeeklyJob(1, gocron.NewWeekdays(time.Monday), gocron.NewAtTimes(gocron.NewAtTime(9, 0, 0))), 5 * time.Minute},
	} {
		t.Run(tc.job, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				nodes := newNodes(t, 3)
				s, err := gocron.NewScheduler() // the jobs' schedules only: it runs them without a lock
				require.NoError(t, err)
				_, err = s.NewJob(tc.def, gocron.NewTask(func() {}), gocron.WithName(tc.job))
				require.NoError(t, err)
				s.Start()
				defer func() { require.NoError(t, s.Shutdown()) }()
				var lockers []*redlockgocron.Locker
				for range 2 {
					l, err := redlockgocron.NewLocker(newReplica(t, nodes), redlockgocron.WithTTL(3*time.Second))
					require.NoError(t, err)
					l.Attach(s)
					lockers = append(lockers, l)
				}
				time.Sleep(100 * time.Millisecond) // between the cron job's ticks
				ctx := context.Background()
				lock, err := lockers[0].Lock(ctx, tc.job)
				require.NoError(t, err)
				granted := time.Now()
				lease := lockers[0].Lease(tc.job)
				require.NotNil(t, lease, "the job's Lease while it runs")
				assert.NotZero(t, lease.Lock().Token())
				require.NoError(t, lock.Unlock(ctx))
				assert.Equal(t, granted, time.Now(), "Unlock does not wait for the hold")
				assert.Nil(t, lockers[0].Lease(tc.job), "no Lease once unlocked")
				requireTakenUntil(t, lockers[1], tc.job, granted.Add(tc.hold))
			})
		})
	}
}

// WithMinHold sets the hold of every job, with no scheduler attached; 0 is
// no hold at all.
func TestLocker_GivenHold(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newNodes(t, 3)
		ctx := context.Background()
		first, err := redlockgocron.NewLocker(newReplica(t, nodes), redlockgocron.WithMinHold(1500*time.Millisecond))
		require.NoError(t, err)
		other, err := redlockgocron.NewLocker(newReplica(t, nodes), redlockgocron.WithMinHold(0))
		require.NoError(t, err)
		lock, err := first.Lock(ctx, "report")
		require.NoError(t, err)
		granted := time.Now()
		require.NoError(t, lock.Unlock(ctx))
		requireTakenUntil(t, other, "report", granted.Add(1500*time.Millisecond))

		lock, err = other.Lock(ctx, "report")
		require.NoError(t, err)
		require.NoError(t, lock.Unlock(ctx))
		lock, err = first.Lock(ctx, "report") // no hold: free at once
		require.NoError(t, err)
		require.NoError(t, lock.Unlock(ctx))
	})
}

// Without a hold to use (no WithMinHold, no Attach) Lock refuses with
// ErrInvalidArgument, before any node is asked: gocron skips every tick and
// reports the error to the job's AfterLockError listener, rather than run
// ticks several times.
func TestLocker_NoHoldWithoutAttach(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newNodes(t, 3)
		l, err := redlockgocron.NewLocker(newReplica(t, nodes))
		require.NoError(t, err)
		s, err := gocron.NewScheduler(gocron.WithDistributedLocker(l))
		require.NoError(t, err)
		lockErrs := make(chan error, 10)
		ran := false
		_, err = s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(func() { ran = true }), gocron.WithName("report"),
			gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) { lockErrs <- err })))
		require.NoError(t, err)
		s.Start()
		time.Sleep(1500 * time.Millisecond)
		require.NoError(t, s.Shutdown())
		assert.False(t, ran)
		require.Len(t, lockErrs, 1)
		err = <-lockErrs
		require.ErrorIs(t, err, redlock.ErrInvalidArgument)
		assert.ErrorContains(t, err, "Attach")
		assert.False(t, nodes[0].m.Exists("gocron:report"))
	})
}

// A lock lost while the job ran (a majority of nodes gone, so extensions
// fail) is reported by Unlock (ErrLockLost); the job could see it coming on
// its Lease. A second Unlock returns the first one's answer.
func TestLocker_UnlockReportsALostLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := newNodes(t, 3)
		l, err := redlockgocron.NewLocker(newReplica(t, nodes), redlockgocron.WithMinHold(0), redlockgocron.WithTTL(time.Second))
		require.NoError(t, err)
		ctx := context.Background()
		lock, err := l.Lock(ctx, "report")
		require.NoError(t, err)
		lease := l.Lease("report")
		nodes[0].Kill()
		nodes[1].Kill()
		<-lease.Done()
		err = lock.Unlock(ctx)
		require.ErrorIs(t, err, redlock.ErrLockLost)
		assert.ErrorContains(t, err, `job "report"`)
		assert.Equal(t, err, lock.Unlock(ctx))
	})
}

// Options are checked by the constructors: a bad value is an error wrapping
// redlock.ErrInvalidArgument, never a silent default.
func TestOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newReplica(t, newNodes(t, 3))
		for name, opts := range map[string][]redlockgocron.Option{
			"nil option":      {nil},
			"zero ttl":        {redlockgocron.WithTTL(0)},
			"fractional ttl":  {redlockgocron.WithTTL(1500 * time.Microsecond)},
			"negative hold":   {redlockgocron.WithMinHold(-time.Second)},
			"nil hold option": {redlockgocron.WithHoldOptions(nil)},
		} {
			_, err := redlockgocron.NewLocker(c, opts...)
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
			_, err = redlockgocron.NewElector(c, opts...)
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		}
		_, err := redlockgocron.NewLocker(nil)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = redlockgocron.NewElector(nil)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
		_, err = redlockgocron.NewElector(c, redlockgocron.WithMinHold(time.Second))
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument, "the hold is a Locker's")
		_, err = redlockgocron.NewLocker(c, redlockgocron.WithTTL(time.Second), redlockgocron.WithKeyPrefix("app:"),
			redlockgocron.WithLockOptions(redlock.WithNodeTimeout(200*time.Millisecond)),
			redlockgocron.WithHoldOptions(redlock.WithExtendInterval(200*time.Millisecond)))
		assert.NoError(t, err)
	})
}

// WithHoldOptions reach the Lease that keeps a job's lock: with a 100 ms
// extension interval the lock has been extended by 150 ms (the default,
// a third of the TTL, would extend it at 333 ms).
func TestLocker_HoldOptionsReachTheLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newReplica(t, newNodes(t, 3))
		l, err := redlockgocron.NewLocker(c, redlockgocron.WithTTL(time.Second), redlockgocron.WithMinHold(0),
			redlockgocron.WithHoldOptions(redlock.WithExtendInterval(100*time.Millisecond)))
		require.NoError(t, err)
		ctx := context.Background()
		lock, err := l.Lock(ctx, "report")
		require.NoError(t, err)
		first := l.Lease("report").ValidUntil()
		time.Sleep(150 * time.Millisecond)
		assert.Equal(t, first.Add(100*time.Millisecond), l.Lease("report").ValidUntil())
		require.NoError(t, lock.Unlock(ctx))
	})
}

// Replicas whose ticks fire together can split the vote: each takes one
// node, none a majority. They try again (for a quarter of the hold) as long
// as no owner holds the key on a majority, so the tick still runs once. Here
// the first tick splits for sure: until 1.05 s each replica's commands reach
// the other replicas' nodes 5 ms late.
func TestLocker_SplitVoteIsRetried(t *testing.T) {
	sc := scenario{interval: time.Second, work: 50 * time.Millisecond, ticks: 3,
		starts: []time.Duration{0, 0, 0}}
	synctest.Test(t, func(t *testing.T) {
		nodes := newNodes(t, 3)
		t0 := time.Now()
		var clients []*redlock.Client
		for r := range 3 {
			clients = append(clients, newSlowReplica(t, nodes, func(node int) time.Duration {
				if node != r && time.Since(t0) < 1050*time.Millisecond {
					return 5 * time.Millisecond
				}
				return 0
			}))
		}
		start, runs := sc.replicas(t, clients)
		assert.Equal(t, ones(3), sc.perTick(t, start, runs))
		requireOneAtATime(t, runs, false)
	})
}

// A replica retries only while nobody holds the lock: one whose tick fires
// while another replica's run holds it gives up at once, even when that run
// ends soon after (past its hold, so its Unlock frees the lock at once).
func TestLocker_HeldLockIsNotRetried(t *testing.T) {
	sc := scenario{interval: time.Second, work: 520 * time.Millisecond, ticks: 5,
		starts: []time.Duration{0, 450 * time.Millisecond}}
	inProcess(t, sc, func(t *testing.T, _ []*testNode, t0 time.Time, runs []run) {
		assert.Equal(t, ones(5), sc.perTick(t, t0, runs))
		requireOneAtATime(t, runs, false)
	})
}
