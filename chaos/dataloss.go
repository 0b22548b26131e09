package chaos

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// ErrNoSnapshot is returned by Node.RestartFromSnapshot on a node that has
// no snapshot (Node.Snapshot) since the last HealAll.
var ErrNoSnapshot = errors.New("chaos: node has no snapshot")

// The data-loss faults beyond a restart without persistence: a FLUSHALL,
// an evicted key, a node replaced by a fresh server, and a restart from a
// snapshot taken earlier (the writes since are lost). The backends
// implement them in dataBackend.

// dataBackend is what the data-loss faults need of a backend, beyond
// backend. Its methods are called with the Node's mutex held.
type dataBackend interface {
	// setPolicy sets the running server's maxmemory_policy.
	setPolicy(ctx context.Context, policy string) error
	// snapshot copies the running server's data aside, replacing an
	// earlier copy.
	snapshot(ctx context.Context) error
	// restore replaces the data of the killed server by the snapshot; false
	// when there is none.
	restore() (bool, error)
	// dropSnapshot forgets the snapshot.
	dropSnapshot() error
	// fresh replaces the killed server, whose data is wiped, by a new one
	// that start starts: no data, no scripts, default settings.
	fresh() error
}

// Flush deletes every key of every database on the node, as FLUSHALL does:
// the server keeps running, its run_id and uptime unchanged (INFO server).
// On a killed node the data it would come back with is deleted. It returns
// ErrNodePaused on a paused node, ErrClosed after Cluster.Close, or the
// server's error.
func (n *Node) Flush(ctx context.Context) error { return n.flush(ctx) }

// SetMaxmemoryPolicy sets the running node's maxmemory_policy (CONFIG SET
// maxmemory-policy on redis-server; in-process, what INFO memory reports,
// as miniredis never evicts). HealAll and every start bring back the
// default, noeviction. It returns ErrNodeDown on a killed node,
// ErrNodePaused on a paused one, ErrClosed after Cluster.Close, or the
// server's error (redis-server refuses an unknown policy).
func (n *Node) SetMaxmemoryPolicy(ctx context.Context, policy string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.runningLocked("set the maxmemory policy of"); err != nil {
		return err
	}
	return n.setPolicyLocked(ctx, policy)
}

func (n *Node) setPolicyLocked(ctx context.Context, policy string) error {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if err := n.be.(dataBackend).setPolicy(ctx, policy); err != nil {
		return fmt.Errorf("chaos: maxmemory policy of %s: %w", n.name, err)
	}
	n.policy = policy
	return nil
}

// EvictKey deletes key from the running node as an eviction would: it sets
// the node's maxmemory_policy to allkeys-lru (so INFO memory shows a node
// that may evict) and deletes the key, leaving every other key (the lock's
// fencing counter and epoch) in place. The errors are SetMaxmemoryPolicy's.
func (n *Node) EvictKey(ctx context.Context, key string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.runningLocked("evict a key of"); err != nil {
		return err
	}
	if err := n.setPolicyLocked(ctx, "allkeys-lru"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if err := n.admin.Del(ctx, key).Err(); err != nil {
		return fmt.Errorf("chaos: evict %s on %s: %w", key, n.name, err)
	}
	return nil
}

// Replace puts a fresh server on the node's address in place of the old
// one, killing it first if it runs: no data, no loaded scripts, default
// settings, a new run_id and uptime from 0. In-process it is a new
// miniredis; on redis-server a new process on a wiped data directory (as
// RestartAmnesia). It waits for the server to answer, bounded by ctx. It
// returns ErrClosed after Cluster.Close, or the error from stopping or
// starting the server.
func (n *Node) Replace(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if err := n.killLocked(); err != nil {
		return err
	}
	if err := errors.Join(n.be.wipe(), n.be.(dataBackend).fresh()); err != nil {
		return err
	}
	n.be.forgetClock()
	return n.startLocked(ctx)
}

// Snapshot copies the running node's data aside, for RestartFromSnapshot,
// replacing an earlier snapshot: the state a power loss would go back to
// (appendfsync everysec loses the writes of the last second). On
// redis-server it is a copy of the data directory (after SAVE, without
// persistence: the RDB file; with it, the AOF); in-process, a copy of every
// key with its expiry as an instant on the node's clock. HealAll drops it.
// It returns ErrNodeDown on a killed node, ErrNodePaused on a paused one,
// ErrClosed after Cluster.Close, or the error of making the copy.
func (n *Node) Snapshot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.runningLocked("snapshot"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout)
	defer cancel()
	if err := n.be.(dataBackend).snapshot(ctx); err != nil {
		return fmt.Errorf("chaos: snapshot %s: %w", n.name, err)
	}
	return nil
}

// RestartFromSnapshot kills the node if it runs and brings it back with the
// data of its snapshot (Snapshot): every write since is lost, and keys whose
// expiry passed meanwhile are gone, as after a power loss with the writes
// of the last moments not yet on disk. The server is a new run (new run_id,
// uptime from 0). It waits for the server to answer, bounded by ctx. It
// returns ErrNoSnapshot (the node is left killed) when there is no
// snapshot, ErrClosed after Cluster.Close, or the error from stopping,
// restoring or starting the server.
func (n *Node) RestartFromSnapshot(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	if err := n.killLocked(); err != nil {
		return err
	}
	ok, err := n.be.(dataBackend).restore()
	if err != nil {
		return fmt.Errorf("chaos: restore %s: %w", n.name, err)
	}
	if !ok {
		return fmt.Errorf("%w (%s)", ErrNoSnapshot, n.name)
	}
	n.be.forgetClock()
	return n.startLocked(ctx)
}

// runningLocked returns an error unless the node is open, running and not
// paused; what says what the caller was about to do.
func (n *Node) runningLocked(what string) error {
	switch {
	case n.closed:
		return ErrClosed
	case n.killed:
		return fmt.Errorf("%w: cannot %s %s", ErrNodeDown, what, n.name)
	case n.paused:
		return fmt.Errorf("%w: cannot %s %s", ErrNodePaused, what, n.name)
	}
	return nil
}

// healDataLocked drops the node's snapshot and, on a running node, brings
// back the default maxmemory policy (a start does that by itself).
func (n *Node) healDataLocked(ctx context.Context) error {
	err := n.be.(dataBackend).dropSnapshot()
	if n.policy != "" && n.policy != defaultPolicy && !n.killed && !n.paused {
		err = errors.Join(err, n.setPolicyLocked(ctx, defaultPolicy))
	}
	return err
}

// snapKey is one key of an in-process snapshot.
type snapKey struct {
	key     string
	kind    string // miniredis Type: string, hash, set, list, zset
	str     string
	fields  map[string]string
	members []string
	scores  map[string]float64
	expires time.Time // node time; zero: no expiry
}

func (b *memBackend) setPolicy(_ context.Context, policy string) error {
	b.infoMu.Lock()
	defer b.infoMu.Unlock()
	b.policy = policy
	return nil
}

// snapshot copies every key through the miniredis API. It is not atomic
// across keys: a command running meanwhile may be half in it, as a write
// half on disk would be.
func (b *memBackend) snapshot(context.Context) error {
	b.syncTime()
	b.setMu.Lock()
	now := b.lastSet
	b.setMu.Unlock()
	var snap []snapKey
	for _, k := range b.m.Keys() {
		s := snapKey{key: k, kind: b.m.Type(k)}
		var err error
		switch s.kind {
		case "":
			continue // expired or deleted meanwhile
		case "string":
			s.str, err = b.m.Get(k)
		case "hash":
			var fields []string
			fields, err = b.m.HKeys(k)
			s.fields = map[string]string{}
			for _, f := range fields {
				s.fields[f] = b.m.HGet(k, f)
			}
		case "set":
			s.members, err = b.m.Members(k)
		case "list":
			s.members, err = b.m.List(k)
		case "zset":
			s.members, err = b.m.ZMembers(k)
			s.scores = map[string]float64{}
			for _, m := range s.members {
				if err == nil {
					s.scores[m], err = b.m.ZScore(k, m)
				}
			}
		default:
			return fmt.Errorf("key %q of type %s cannot be copied", k, s.kind)
		}
		if errors.Is(err, miniredis.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("copy key %q: %w", k, err)
		}
		if ttl := b.m.TTL(k); ttl > 0 {
			s.expires = now.Add(ttl)
		}
		snap = append(snap, s)
	}
	b.snap = snap
	return nil
}

func (b *memBackend) restore() (bool, error) {
	if b.snap == nil {
		return false, nil
	}
	b.m.FlushAll()
	// TTLs are relative to the miniredis clock: bring it to the node's
	// time first, so that the time since the snapshot counts once.
	b.syncTime()
	b.setMu.Lock()
	now := b.lastSet
	b.setMu.Unlock()
	for _, s := range b.snap {
		var ttl time.Duration
		if !s.expires.IsZero() {
			if ttl = s.expires.Sub(now); ttl <= 0 {
				continue // expired while the node was down
			}
		}
		var err error
		switch s.kind {
		case "string":
			err = b.m.Set(s.key, s.str)
		case "hash":
			for f, v := range s.fields {
				b.m.HSet(s.key, f, v)
			}
		case "set":
			_, err = b.m.SetAdd(s.key, s.members...)
		case "list":
			_, err = b.m.Push(s.key, s.members...)
		case "zset":
			for _, m := range s.members {
				if err == nil {
					_, err = b.m.ZAdd(s.key, s.scores[m], m)
				}
			}
		}
		if err != nil {
			return false, fmt.Errorf("restore key %q: %w", s.key, err)
		}
		if ttl > 0 {
			b.m.SetTTL(s.key, ttl)
		}
	}
	return true, nil
}

func (b *memBackend) dropSnapshot() error {
	b.snap = nil
	return nil
}

// fresh makes a new miniredis, which start starts on the same address.
func (b *memBackend) fresh() error {
	m := miniredis.NewMiniRedis()
	b.setMu.Lock()
	m.SetTime(b.lastSet)
	b.setMu.Unlock()
	m.ClockTTL(true)
	b.m, b.freshPending = m, true
	return nil
}

func (b *realBackend) setPolicy(ctx context.Context, policy string) error {
	return b.admin.ConfigSet(ctx, "maxmemory-policy", policy).Err()
}

// snapDir is where the snapshot of the data directory goes.
func (b *realBackend) snapDir() string { return b.dir + ".snapshot" }

// snapshot copies the data directory. Without persistence the server
// writes its RDB file first (SAVE), which it loads on start; with it, the
// AOF files are copied as the kernel has them (appendfsync always: every
// acknowledged write), which is what a start with appendonly yes loads.
func (b *realBackend) snapshot(ctx context.Context) error {
	if !b.persistence {
		if err := b.admin.Save(ctx).Err(); err != nil {
			return fmt.Errorf("SAVE: %w", err)
		}
	}
	if err := os.RemoveAll(b.snapDir()); err != nil {
		return err
	}
	return copyDir(b.dir, b.snapDir())
}

func (b *realBackend) restore() (bool, error) {
	if _, err := os.Stat(b.snapDir()); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err := b.wipe(); err != nil {
		return false, err
	}
	return true, copyDir(b.snapDir(), b.dir)
}

func (b *realBackend) dropSnapshot() error { return os.RemoveAll(b.snapDir()) }

// fresh does nothing: start runs a new process, and the directory was
// wiped.
func (b *realBackend) fresh() error { return nil }

// copyDir copies the regular files and directories under src into dst,
// creating dst.
func copyDir(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o700)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(to, data, 0o600)
	})
}
