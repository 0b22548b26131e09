package redlock_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// The election tests run in synctest bubbles, as Do's do: fake time, and a
// test fails if a goroutine it started is still blocked when it ends.

const electTTL = 3 * time.Second

// A leader's term is its lock's fencing token, its identity is on every
// node before the random part of the owner value, and Leader reads both
// from a majority.
func TestCampaign_TermIsTokenAndLeaderReadsIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		l, err := c.rl.Campaign(ctx, "scheduler", "host-a", electTTL)
		require.NoError(t, err)
		assert.Equal(t, "scheduler", l.Name())
		assert.Equal(t, "host-a", l.Identity())
		assert.Equal(t, l.Lease().Lock().Token(), l.Term())
		assert.NotZero(t, l.Term())
		key := redlock.ElectionKey("scheduler")
		assert.Equal(t, "{scheduler}:leader", key)
		assert.Equal(t, "x{tag}:leader", redlock.ElectionKey("x{tag}"))
		synctest.Wait() // Campaign returned at a majority: the third node's call
		for i, n := range c.nodes {
			assert.True(t, strings.HasPrefix(n.Value(key), "host-a#"), "node %d holds %q", i, n.Value(key))
		}
		got, err := c.rl.Leader(ctx, "scheduler")
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Identity: "host-a", Term: l.Term()}, got)

		require.NoError(t, l.Resign(ctx))
		assert.ErrorIs(t, l.Err(), context.Canceled)
		c.requireGone(t, key)
		_, err = c.rl.Leader(ctx, "scheduler")
		assert.ErrorIs(t, err, redlock.ErrNoLeader)
		require.NoError(t, l.Resign(ctx), "a second Resign returns the first's result")
	})
}

// Bad input gets ErrInvalidArgument (or ErrClosed) before any node is
// contacted, as the lock's calls do.
func TestElection_BadInput(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		fn := func(context.Context, *redlock.Leadership) error { return nil }
		for name, err := range map[string]error{
			"empty name":     campaignErr(c.rl.Campaign(ctx, "", "a", electTTL)),
			"empty identity": campaignErr(c.rl.Campaign(ctx, "e", "", electTTL)),
			"control char":   campaignErr(c.rl.Campaign(ctx, "e", "a\nb", electTTL)),
			"not utf-8":      campaignErr(c.rl.Campaign(ctx, "e", "a\xffb", electTTL)),
			"long identity":  campaignErr(c.rl.Campaign(ctx, "e", strings.Repeat("x", 257), electTTL)),
			"ttl too short":  campaignErr(c.rl.Campaign(ctx, "e", "a", time.Millisecond)),
			"interval":       campaignErr(c.rl.Campaign(ctx, "e", "a", electTTL, redlock.WithExtendInterval(electTTL))),
			"fencing off":    campaignErr(c.rl.Campaign(ctx, "e", "a", electTTL, redlock.WithFencing(false))),
			"bad key name":   campaignErr(c.rl.Campaign(ctx, "e", "a", electTTL, redlock.WithKeyPrefix("x{}"))),
			"nil option":     campaignErr(c.rl.Campaign(ctx, "e", "a", electTTL, nil)),
			"lead nil fn":    c.rl.Lead(ctx, "e", "a", electTTL, nil),
			"lead no name":   c.rl.Lead(ctx, "", "a", electTTL, fn),
			"leader no name": leaderErr(c.rl.Leader(ctx, "")),
			"watch no name":  watchErr(c.rl.WatchLeader(ctx, "", time.Second)),
			"watch every 0":  watchErr(c.rl.WatchLeader(ctx, "e", 0)),
		} {
			assert.ErrorIs(t, err, redlock.ErrInvalidArgument, name)
		}
		assert.Zero(t, c.holders(redlock.ElectionKey("e")), "nothing was sent")

		require.NoError(t, c.rl.Close())
		assert.ErrorIs(t, campaignErr(c.rl.Campaign(ctx, "e", "a", electTTL)), redlock.ErrClosed)
		assert.ErrorIs(t, c.rl.Lead(ctx, "e", "a", electTTL, fn), redlock.ErrClosed)
		assert.ErrorIs(t, leaderErr(c.rl.Leader(ctx, "e")), redlock.ErrClosed)
		assert.ErrorIs(t, watchErr(c.rl.WatchLeader(ctx, "e", time.Second)), redlock.ErrClosed)
	})
}

func campaignErr(_ *redlock.Leadership, err error) error { return err }
func leaderErr(_ redlock.Leader, err error) error        { return err }
func watchErr(_ <-chan redlock.Leader, err error) error  { return err }

// Resign hands over at once: the waiting candidate, whose retry delay is
// 10 s, is woken by the release and elected at the instant of the resign
// (fake time), with a higher term.
func TestResign_HandsOverAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c, other := waitingCluster(t)
		a, err := c.rl.Campaign(ctx, "e", "a", electTTL)
		require.NoError(t, err)
		elected := make(chan *redlock.Leadership)
		go func() {
			b, err := other.Campaign(ctx, "e", "b", electTTL)
			if err != nil {
				t.Error(err)
			}
			elected <- b
		}()
		time.Sleep(5 * electTTL) // a leads for many TTLs: extended
		synctest.Wait()
		require.NoError(t, a.Err())
		resigned := time.Now()
		require.NoError(t, a.Resign(ctx))
		b := <-elected
		assert.Equal(t, resigned, time.Now(), "elected at the resign, not at the retry delay (10 s)")
		assert.Greater(t, b.Term(), a.Term())
		got, err := c.rl.Leader(ctx, "e")
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Identity: "b", Term: b.Term()}, got)
		require.NoError(t, b.Resign(ctx))
	})
}

// A leader that can no longer extend loses its leadership: the context ends
// with ErrLockLost before the keys can expire, and a rival is elected only
// after that, with a higher term.
func TestLeadership_LostEndsContextBeforeRival(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		rival := c.secondClient(t)
		a, err := c.rl.Campaign(ctx, "e", "a", electTTL)
		require.NoError(t, err)
		c.nodes[1].Refuse()
		c.nodes[2].Refuse()
		lost := make(chan time.Time, 1)
		go func() {
			<-a.Done()
			lost <- time.Now()
		}()
		time.Sleep(electTTL / 2)
		c.nodes[1].Revive(t)
		c.nodes[2].Revive(t)
		b, err := rival.Campaign(ctx, "e", "b", electTTL)
		require.NoError(t, err)
		electedAt := time.Now()
		assert.ErrorIs(t, a.Err(), redlock.ErrLockLost)
		lostAt := <-lost
		assert.True(t, lostAt.Before(electedAt), "lost at %v, rival elected at %v", lostAt, electedAt)
		assert.Greater(t, b.Term(), a.Term())
		_ = a.Resign(ctx) // a deposed leader's Resign does not touch b's lock
		got, err := c.rl.Leader(ctx, "e")
		require.NoError(t, err)
		assert.Equal(t, "b", got.Identity, "a's resign left b's lock alone")
		require.NoError(t, b.Resign(ctx))
		c.endRedials(1, 2)
	})
}

// Campaign with a leadership's context is reentrant: a nested leadership
// with the same term, whose Resign leaves the outer one leading; another
// identity is refused.
func TestCampaign_Reentrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		outer, err := c.rl.Campaign(ctx, "e", "a", electTTL)
		require.NoError(t, err)
		inner, err := c.rl.Campaign(outer.Context(), "e", "a", electTTL)
		require.NoError(t, err)
		assert.Equal(t, outer.Term(), inner.Term())
		require.NoError(t, inner.Resign(ctx))
		assert.NoError(t, outer.Err(), "the outer leadership goes on")
		synctest.Wait() // the acquisition's call to the third node
		assert.Equal(t, 3, c.holders(redlock.ElectionKey("e")))
		_, err = c.rl.Campaign(outer.Context(), "e", "b", electTTL)
		assert.ErrorIs(t, err, redlock.ErrInvalidArgument)
		require.NoError(t, outer.Resign(ctx))
		c.requireGone(t, redlock.ElectionKey("e"))
	})
}

// Lead re-campaigns after each loss (here the hold limit, which resigns at
// once): fn runs once per term, never two at once, the terms increase, and
// Lead returns ctx's cause with no goroutine left (the bubble checks).
func TestLead_RecampaignsAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		rival := c.secondClient(t)
		ctx, cancel := context.WithCancelCause(context.Background())
		stop := errors.New("enough")
		var (
			mu      sync.Mutex
			terms   []uint64
			running int
		)
		rivalDone := make(chan error)
		go func() {
			rivalDone <- rival.Lead(ctx, "e", "rival", electTTL, func(ctx context.Context, l *redlock.Leadership) error {
				mu.Lock()
				terms = append(terms, l.Term())
				mu.Unlock()
				<-ctx.Done()
				return ctx.Err()
			}, redlock.WithMaxHold(electTTL))
		}()
		err := c.rl.Lead(ctx, "e", "a", electTTL, func(lctx context.Context, l *redlock.Leadership) error {
			mu.Lock()
			running++
			if running > 1 {
				t.Error("two calls of fn at once")
			}
			terms = append(terms, l.Term())
			if len(terms) >= 6 {
				cancel(stop)
			}
			mu.Unlock()
			<-lctx.Done()
			mu.Lock()
			running--
			mu.Unlock()
			return lctx.Err()
		}, redlock.WithMaxHold(electTTL))
		assert.ErrorIs(t, err, stop)
		assert.ErrorIs(t, <-rivalDone, stop)
		require.GreaterOrEqual(t, len(terms), 6)
		for i := 1; i < len(terms); i++ {
			assert.Greater(t, terms[i], terms[i-1], "term %d", i)
		}
		c.requireGone(t, redlock.ElectionKey("e"))
	})
}

// fn returning while still leading ends Lead with fn's error, after a
// resign; a panic resigns and propagates.
func TestLead_FnReturnsOrPanics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		boom := errors.New("boom")
		err := c.rl.Lead(ctx, "e", "a", electTTL, func(context.Context, *redlock.Leadership) error { return boom })
		assert.ErrorIs(t, err, boom)
		c.requireGone(t, redlock.ElectionKey("e"))
		assert.PanicsWithValue(t, "oops", func() {
			_ = c.rl.Lead(ctx, "e", "a", electTTL, func(context.Context, *redlock.Leadership) error { panic("oops") })
		})
		c.requireGone(t, redlock.ElectionKey("e"))
	})
}

// WatchLeader sends the current leader, then each change as announced over
// pub/sub (its re-read interval is an hour, so only the announcements can
// tell it), and a crashed leader's end at the next re-read; its channel is
// closed once ctx ends.
func TestWatchLeader_FollowsChanges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		other := c.secondClient(t)
		wctx, stop := context.WithCancel(ctx)
		watch, err := c.rl.WatchLeader(wctx, "e", time.Hour)
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{}, <-watch, "no leader yet")
		time.Sleep(time.Second) // subscribed
		start := time.Now()
		a, err := c.rl.Campaign(ctx, "e", "a", electTTL)
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Identity: "a", Term: a.Term()}, <-watch)
		assert.Less(t, time.Since(start), time.Second, "told by the announcement, not the hourly re-read")
		b := make(chan *redlock.Leadership)
		go func() {
			l, err := other.Campaign(ctx, "e", "b", electTTL)
			if err != nil {
				t.Error(err)
			}
			b <- l
		}()
		time.Sleep(time.Second)
		start = time.Now()
		require.NoError(t, a.Resign(ctx))
		lb := <-b
		var got redlock.Leader
		for got.Identity != "b" {
			got = <-watch // perhaps "no leader" first, between the two
		}
		assert.Less(t, time.Since(start), time.Second, "told by the announcements, not the hourly re-read")
		assert.Equal(t, lb.Term(), got.Term)

		// A crash: the lease stops without a release; nobody announces.
		crashCtx, crash := context.WithCancel(ctx)
		require.NoError(t, lb.Resign(ctx))
		for got.Term != 0 {
			got = <-watch
		}
		cl, err := c.rl.Campaign(crashCtx, "e", "c", electTTL)
		require.NoError(t, err)
		assert.Equal(t, redlock.Leader{Identity: "c", Term: cl.Term()}, <-watch)
		crash() // the extensions stop; the keys expire at the TTL
		<-cl.Done()
		assert.Equal(t, redlock.Leader{}, <-watch, "seen at the next re-read")
		stop()
		for range watch {
		}
	})
}

// Leader and WatchLeader use WithKeyPrefix and WithNodeTimeout, and refuse
// every other option, which they would ignore, naming it.
func TestLeader_RefusesOptionsItIgnores(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3)
		_, err := c.rl.Leader(ctx, "e", redlock.WithKeyPrefix("app:"), redlock.WithNodeTimeout(time.Second))
		assert.ErrorIs(t, err, redlock.ErrNoLeader, "the options it uses are accepted")
		for name, opt := range map[string]redlock.Option{
			"WithRetry":           redlock.WithRetry(redlock.NoRetry()),
			"WithFencing":         redlock.WithFencing(true),
			"WithDriftFactor":     redlock.WithDriftFactor(0.01),
			"WithOwnerGenerator":  redlock.WithOwnerGenerator(redlock.RandomOwner),
			"WithQuarantine":      redlock.WithQuarantine(redlock.DefaultQuarantine),
			"WithoutAmnesiaGuard": redlock.WithoutAmnesiaGuard(),
			"WithOutageLimit":     redlock.WithOutageLimit(time.Minute),
			"WithRetention":       redlock.WithRetention(redlock.DefaultRetention),
			"WithLogger":          redlock.WithLogger(slog.New(slog.DiscardHandler)),
			"WithMinHold":         redlock.WithMinHold(time.Second),
		} {
			_, err := c.rl.Leader(ctx, "e", opt)
			requireInvalid(t, err, "Leader does not use "+name)
			_, err = c.rl.WatchLeader(ctx, "e", time.Second, redlock.WithKeyPrefix("app:"), opt)
			requireInvalid(t, err, "WatchLeader does not use "+name)
		}
	})
}

// A cluster whose nodes refuse the scripts for good (a password they
// require) makes Lead return at once, naming the node, rather than
// campaign until ctx ends; Leader says the same.
func TestLead_MisconfiguredNodesReturnAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, 3)
		for _, n := range c.nodes {
			n.Fail("NOAUTH Authentication required.")
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		start := time.Now()
		err := c.rl.Lead(ctx, "e", "a", electTTL, func(context.Context, *redlock.Leadership) error { return nil })
		require.ErrorIs(t, err, redlock.ErrMisconfigured)
		assert.Contains(t, err.Error(), "requires a password")
		assert.Less(t, time.Since(start), time.Second, "one campaign, not retried")

		_, err = c.rl.Leader(ctx, "e")
		require.ErrorIs(t, err, redlock.ErrNoQuorum)
		require.ErrorIs(t, err, redlock.ErrMisconfigured)
		assert.Contains(t, err.Error(), "node "+c.rl.Nodes()[0]+" requires a password")
	})
}
