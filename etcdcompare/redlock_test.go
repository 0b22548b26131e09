package etcdcompare

import (
	"context"
	"testing"
	"time"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/chaos"
)

// TestRedlockLocker: the seam fits Redlock too. Done closes at the lock's
// validity deadline (not before), and tokens rise across holders.
func TestRedlockLocker(t *testing.T) {
	checkLeaks(t)
	ctx := context.Background()
	cluster, err := chaos.NewCluster(ctx, chaos.ClusterOptions{Backend: chaos.InProcess, Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	c, err := cluster.Client(redlock.WithFencing(true), redlock.WithNodeTimeout(200*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var l chaos.Locker = NewRedlockLocker(c)

	h1, err := l.Acquire(ctx, "k", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	deadline := h1.(*redlockHeld).lock.ValidUntil()
	<-h1.Done()
	if now := time.Now(); now.Before(deadline) {
		t.Fatalf("Done closed %v before the validity deadline", deadline.Sub(now))
	}
	if err := h1.Release(ctx); err != nil {
		t.Logf("release after expiry: %v", err)
	}
	h2, err := l.Acquire(ctx, "k", 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if h1.Token() == 0 || h2.Token() <= h1.Token() {
		t.Fatalf("tokens %d then %d: want positive and strictly increasing", h1.Token(), h2.Token())
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
