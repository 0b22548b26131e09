package fencing_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/fencing"
)

// lockNodes starts n miniredis nodes for the lock. Each call to client
// returns a new redlock Client (with opts) over its own go-redis connections
// to them, as a separate process would have. Everything is closed when the
// test ends.
func lockNodes(t *testing.T, n int, opts ...redlock.Option) (nodes []*miniredis.Miniredis, client func() *redlock.Client) {
	t.Helper()
	for range n {
		nodes = append(nodes, miniredis.RunT(t))
	}
	addrs := make([]string, n) // kept: m.Addr() panics once a node is closed
	for i, m := range nodes {
		addrs[i] = m.Addr()
	}
	client = func() *redlock.Client {
		rcs := make([]redis.UniversalClient, n)
		for i, addr := range addrs {
			rc := redlock.NewNodeClient(addr, nil)
			t.Cleanup(func() { _ = rc.Close() })
			rcs[i] = rc
		}
		// A generous per-node timeout: these tests check tokens, not speed,
		// and run under -race on a loaded machine.
		c, err := redlock.New(rcs, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return nodes, client
}

// The case fencing exists for (Kleppmann's figure): holder A pauses past its
// lock, the lock expires and passes to B, B writes, then A wakes up and
// writes as if it still held the lock. Redlock cannot prevent the overlap;
// the resource, checking tokens, rejects A's write. With and without the
// amnesia guard (no node loses data here: the guard must not get in the way).
func TestEndToEndPausedHolderIsRejected(t *testing.T) {
	t.Run("amnesia guard off", func(t *testing.T) { testPausedHolder(t, redlock.WithoutAmnesiaGuard()) })
	t.Run("amnesia guard on (the default)", func(t *testing.T) { testPausedHolder(t) })
}

func testPausedHolder(t *testing.T, opts ...redlock.Option) {
	ctx := context.Background()
	const key, ttl = "report:42", 2 * time.Second
	nodes, newClient := lockNodes(t, 3, opts...)
	_, store := newStore(t)  // the resource: a Redis that is not one of the lock's nodes
	var reg fencing.Register // the same resource, if it lived in this process
	var body string          // written only through reg.Do

	write := func(l *redlock.Lock, text string) (redisErr, regErr error) {
		redisErr = fencing.SetIfNewer(ctx, store, key, l.Token(), text)
		regErr = reg.Do(l.Token(), func() error { body = text; return nil })
		return redisErr, regErr
	}

	a, err := newClient().TryAcquire(ctx, key, ttl)
	require.NoError(t, err)
	require.NotZero(t, a.Token(), "fencing is on by default")

	if len(opts) == 0 { // the amnesia guard is on by default
		// The first use's vouching is sent 10 ms after A got the lock;
		// a real pause lasts far longer.
		require.Eventually(t, func() bool {
			for _, m := range nodes {
				if m.HGet("{"+key+"}:epoch", "trusted") != "1" {
					return false
				}
			}
			return true
		}, 5*time.Second, time.Millisecond, "A's acquisition vouched for every node")
	}

	// A pauses (a GC pause, a swapped-out process). miniredis TTLs move only
	// with FastForward: the lock key expires on every node while A is asleep.
	// (The vote was decided at a majority: A's SET may still be on its way to
	// the last node, so expire until it has gone everywhere.)
	require.Eventually(t, func() bool {
		gone := true
		for _, m := range nodes {
			m.FastForward(ttl + time.Millisecond)
			gone = gone && !m.Exists(key)
		}
		return gone
	}, 5*time.Second, time.Millisecond, "A's key expired on every node")

	b, err := newClient().TryAcquire(ctx, key, ttl)
	require.NoError(t, err, "the key is free on every node")
	require.Greater(t, b.Token(), a.Token(), "the later holder's token is higher")
	rErr, gErr := write(b, "B's report")
	require.NoError(t, rErr)
	require.NoError(t, gErr)

	// A wakes up and writes: both resources refuse, naming B's token.
	rErr, gErr = write(a, "A's stale report")
	for _, err := range []error{rErr, gErr} {
		require.ErrorIs(t, err, fencing.ErrStale)
		var se *fencing.StaleError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, fencing.StaleError{Token: a.Token(), Highest: b.Token()}, *se)
	}
	v, tok, err := fencing.GetWithToken(ctx, store, key)
	require.NoError(t, err)
	assert.Equal(t, "B's report", v)
	assert.Equal(t, b.Token(), tok)
	assert.Equal(t, "B's report", body)

	// A's release cannot touch B's lock; B's can.
	_ = a.Release(ctx)
	for i, r := range b.Nodes() {
		if r.Outcome == redlock.OutcomeGranted {
			v, err := nodes[i].Get(key)
			require.NoError(t, err)
			require.Equal(t, b.Owner(), v, "B's key survives A's release on %s", r.Node)
		}
	}
	require.NoError(t, b.Release(ctx))
}

// Successive holders, each acquiring on a different majority (one of the 3
// nodes is down each round, and was down when the previous holder wrote its
// token back), get strictly increasing tokens: any two majorities share a
// node, and that node kept the earlier token. The resource accepts them all.
//
// The amnesia guard is off here: no node loses data, and which nodes a first
// use leaves vouched for (the guard's business, tested with the library) is
// not what this test is about.
func TestEndToEndTokensIncreaseAcrossDifferentQuorums(t *testing.T) {
	ctx := context.Background()
	const key, ttl = "job:nightly", 5 * time.Second
	nodes, newClient := lockNodes(t, 3, redlock.WithoutAmnesiaGuard())
	_, store := newStore(t)

	// First use of the key, with every node up.
	first, err := newClient().TryAcquire(ctx, key, ttl)
	require.NoError(t, err)
	require.NoError(t, fencing.SetIfNewer(ctx, store, key, first.Token(), "round 0"))
	require.NoError(t, first.Release(ctx))

	last := first.Token()
	for round := 1; round <= 6; round++ {
		down := nodes[round%len(nodes)]
		down.Close() // keeps its data: this is not amnesia
		// Acquire retries: a release of the previous round may still be on
		// its way to a node (Release returns once a majority confirmed).
		l, err := newClient().Acquire(ctx, key, ttl)
		require.NoError(t, err, "round %d: 2 of 3 nodes are a majority", round)
		require.Greater(t, l.Token(), last, "round %d", round)
		last = l.Token()
		require.NoError(t, fencing.SetIfNewer(ctx, store, key, l.Token(), fmt.Sprintf("round %d", round)))
		require.NoError(t, l.Release(ctx))
		require.NoError(t, down.Restart())
		// A release that was on its way to this node when it went down never
		// arrived: let that key expire, as it would in real time.
		down.FastForward(ttl)
	}
	v, tok, err := fencing.GetWithToken(ctx, store, key)
	require.NoError(t, err)
	assert.Equal(t, "round 6", v)
	assert.Equal(t, last, tok)
}
