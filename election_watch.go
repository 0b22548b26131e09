package redlock

// Watching an election: a pub/sub subscription on every node to the
// election's channel, on which Campaign and Resign announce changes, and a
// slow re-read in case a message is lost or a leader crashes.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// WatchLeader follows the election name and sends its leader on the returned
// channel: first the leader read at once, then each change; a Leader with
// Term 0 means no leader. It subscribes on every node to the election's
// channel and re-reads the leader (as Leader does, from a majority) when a
// message comes, and otherwise every `every`. Every value sent was held by a
// majority of the nodes when it was read, terms sent never decrease, and the
// channel keeps only the latest value: see Leader election in the package
// doc for how soon a change is seen and what may be missed.
//
// The channel is closed once ctx ends, or within `every` after the Client is
// closed; its goroutines and pub/sub connections (one per node) end first. It
// returns ErrInvalidArgument for an empty name or an `every` that is not
// positive, ErrClosed on a closed Client. opts may set WithKeyPrefix and
// WithNodeTimeout only: any other option, which it would ignore, gives
// ErrInvalidArgument naming it.
func (c *Client) WatchLeader(ctx context.Context, name string, every time.Duration, opts ...Option) (<-chan Leader, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	if every <= 0 {
		return nil, fmt.Errorf("%w: watch re-read interval %v must be positive", ErrInvalidArgument, every)
	}
	onNodes, cfg, err := c.leaderKey("WatchLeader", name, opts)
	if err != nil {
		return nil, err
	}
	w := &leaderWatch{c: c, cfg: cfg, onNodes: onNodes, every: every, out: make(chan Leader, 1), kick: make(chan struct{}, 1)}
	go w.run(ctx)
	return w.out, nil
}

// leaderWatch is one WatchLeader.
type leaderWatch struct {
	c       *Client
	cfg     config
	onNodes string
	every   time.Duration
	out     chan Leader
	kick    chan struct{} // buffered: a message came, re-read
}

// run subscribes on every node, then re-reads the leader on every message
// and every w.every, until ctx ends or the Client is closed.
func (w *leaderWatch) run(ctx context.Context) {
	defer close(w.out)
	rctx, stop := context.WithCancel(ctx) // the receivers' context
	var wg sync.WaitGroup
	var subs []*redis.PubSub
	ch := leaderChannelPrefix + w.onNodes
	for _, n := range w.c.nodes {
		s, ok := n.Client.(subscriber)
		if !ok || isNil(s) {
			continue
		}
		ps := s.Subscribe(context.Background())
		subs = append(subs, ps)
		wg.Go(func() { w.receive(rctx, ps, ch) })
	}
	defer func() {
		stop()
		for _, ps := range subs {
			_ = ps.Close() // ends receive's Receive
		}
		wg.Wait()
	}()

	var (
		last    Leader
		sent    bool
		maxTerm uint64
	)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-t.C:
		}
		l, err := w.c.readLeader(ctx, w.onNodes, w.cfg)
		switch {
		case errors.Is(err, ErrClosed):
			return
		case err != nil && !errors.Is(err, ErrNoLeader):
			// Too few nodes answered: nothing known, nothing sent.
		case l.Term != 0 && l.Term < maxTerm:
			// Read from nodes that lag behind a leader already sent.
		case !sent || l != last:
			last, sent, maxTerm = l, true, max(maxTerm, l.Term)
			select { // keep only the latest value
			case <-w.out:
			default:
			}
			w.out <- l
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(w.every)
	}
}

// receive subscribes ps to the election's channel and turns each message
// into a kick, until ctx ends or ps is closed. After a failed read it waits
// (receiveBackoff, doubling) before reading again; go-redis reconnects and
// subscribes again meanwhile.
func (w *leaderWatch) receive(ctx context.Context, ps *redis.PubSub, ch string) {
	sctx, cancel := context.WithTimeout(ctx, subscribeTimeout)
	err := ps.Subscribe(sctx, ch)
	cancel()
	if err != nil && ctx.Err() != nil {
		return
	}
	backoff := receiveBackoff
	for {
		m, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			if errors.Is(err, redis.ErrClosed) {
				return
			}
			sleepCtx(ctx, backoff)
			backoff = min(2*backoff, receiveBackoffMax)
			continue
		}
		backoff = receiveBackoff
		if _, ok := m.(*redis.Message); ok {
			select {
			case w.kick <- struct{}{}:
			default:
			}
		}
	}
}
