package etcdcompare

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func TestTTLMustBeWholeSeconds(t *testing.T) {
	for _, ttl := range []time.Duration{0, -time.Second, 1500 * time.Millisecond, time.Millisecond} {
		if _, err := ttlSeconds(ttl); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ttlSeconds(%v) = %v, want ErrInvalidArgument", ttl, err)
		}
		// Acquire checks before it touches the client.
		l := NewEtcdLocker(nil, "/t")
		if _, err := l.Acquire(context.Background(), "k", ttl); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Acquire(ttl %v) = %v, want ErrInvalidArgument", ttl, err)
		}
		l.Close()
	}
	if n, err := ttlSeconds(2 * time.Second); err != nil || n != 2 {
		t.Errorf("ttlSeconds(2s) = %d, %v; want 2, nil", n, err)
	}
}

func TestStartClusterRejectsBadSize(t *testing.T) {
	if _, err := StartCluster(context.Background(), 0); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("StartCluster(0) = %v, want ErrInvalidArgument", err)
	}
}

// TestEtcdLocker checks the adapter on a real cluster: mutual exclusion, a
// failed Acquire leaves no key, tokens (create revisions) rise with holder
// order, and Done closes when the session's lease is gone.
func TestEtcdLocker(t *testing.T) {
	checkLeaks(t)
	ctx := context.Background()
	c, err := StartCluster(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	newClient := func(m int) *clientv3.Client {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Member(m).ClientAddr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		return cli
	}
	cliA, cliB := newClient(0), newClient(1)
	a, b := NewEtcdLocker(cliA, "/t"), NewEtcdLocker(cliB, "/t")
	defer a.Close()
	defer b.Close()

	ha, err := a.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// B cannot get it while A holds it, and its failed attempt leaves no
	// key of its own behind.
	bctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = b.Acquire(bctx, "k", time.Second)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("B's Acquire while A holds = %v, want context.DeadlineExceeded", err)
	}
	keys, err := cliA.Get(ctx, "/t/k/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(keys.Kvs) != 1 {
		t.Fatalf("after B's failed Acquire: %d lock keys, want A's only", len(keys.Kvs))
	}
	if got := uint64(keys.Kvs[0].CreateRevision); got != ha.Token() {
		t.Fatalf("A's token %d, its key's create revision %d", ha.Token(), got)
	}

	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hb, err := b.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if hb.Token() <= ha.Token() {
		t.Fatalf("tokens A %d then B %d: want strictly increasing", ha.Token(), hb.Token())
	}

	// Revoking B's lease (what expiry does) closes B's Done.
	select {
	case <-hb.Done():
		t.Fatal("Done closed while the session lives")
	default:
	}
	b.mu.Lock()
	lease := b.session.Lease()
	b.mu.Unlock()
	if _, err := cliA.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	select {
	case <-hb.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("Done not closed 10 s after the lease was revoked")
	}
	// The next Acquire makes a new session.
	hb2, err := b.Acquire(ctx, "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if hb2.Token() <= hb.Token() {
		t.Fatalf("token after a new session %d, before %d: want strictly increasing", hb2.Token(), hb.Token())
	}
	if err := hb2.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestClusterFaultsRejectBadMember(t *testing.T) {
	var c Cluster // no members: every index is out of range
	for _, f := range []func(int) error{c.Isolate, c.Rejoin, c.Kill} {
		for _, i := range []int{-1, 0, 3} {
			if err := f(i); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("member %d: %v, want ErrInvalidArgument", i, err)
			}
		}
	}
}
