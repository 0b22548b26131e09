package chaos

import (
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

// serverInfo is what INFO server and INFO memory say of a node.
type serverInfo struct {
	runID  string
	uptime int
	policy string
}

// readInfo asks rdb for INFO server and INFO memory, in one call as the
// library's per-node guard may.
func readInfo(t *testing.T, rdb *redis.Client) serverInfo {
	t.Helper()
	text, err := rdb.Info(tctx(t, 2*time.Second), "server", "memory").Result()
	mustDo(t, "INFO server memory", err)
	var si serverInfo
	var ok bool
	si.runID, ok = infoField(text, "run_id")
	require.True(t, ok, "INFO server has no run_id:\n%s", text)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{40}$`), si.runID)
	up, ok := infoField(text, "uptime_in_seconds")
	require.True(t, ok, "INFO server has no uptime_in_seconds:\n%s", text)
	si.uptime, err = strconv.Atoi(up)
	require.NoError(t, err)
	si.policy, ok = infoField(text, "maxmemory_policy")
	require.True(t, ok, "INFO memory has no maxmemory_policy:\n%s", text)
	return si
}

// An in-process node answers INFO server and INFO memory as redis-server
// does: a run_id that every start changes (a restart that keeps the data,
// one that loses it, a fresh server), uptime on the node's own clock from
// 0 at each start, both kept by FLUSHALL; the maxmemory policy that was
// set, back to noeviction after a start and after HealAll. The same checks
// hold on redis-server, except the clock jump (its uptime follows the
// machine's clock when the clock is emulated).
func TestNodeInfoServerLikeRedis(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		c := newTestCluster(t, ClusterOptions{Backend: b, Nodes: 1, Persistence: true})
		n := c.Node(0)
		rdb := nodeRedis(t, n.Addr())
		first := readInfo(t, rdb)
		assert.Equal(t, "noeviction", first.policy)
		assert.Less(t, first.uptime, 5)

		if b == InProcess {
			mustDo(t, "JumpClock", n.JumpClock(time.Hour))
			jumped := readInfo(t, rdb)
			assert.Equal(t, first.runID, jumped.runID)
			assert.GreaterOrEqual(t, jumped.uptime, 3600, "uptime follows the node's clock")
		}
		setKey(t, rdb, "k", 0)
		before := readInfo(t, rdb)
		mustDo(t, "Flush", n.Flush(tctx(t, 2*time.Second)))
		assert.Empty(t, getKey(t, rdb, "k"))
		flushed := readInfo(t, rdb)
		assert.Equal(t, before.runID, flushed.runID, "FLUSHALL keeps the run_id")
		assert.GreaterOrEqual(t, flushed.uptime, before.uptime, "FLUSHALL keeps the uptime")

		mustDo(t, "SetMaxmemoryPolicy", n.SetMaxmemoryPolicy(tctx(t, 2*time.Second), "allkeys-lru"))
		assert.Equal(t, "allkeys-lru", readInfo(t, rdb).policy)

		seen := map[string]bool{first.runID: true}
		setKey(t, rdb, "kept", 0)
		for _, restart := range []struct {
			name string
			do   func() error
			kept bool
		}{
			{"Restart", func() error { return n.Restart(tctx(t, 5*time.Second)) }, true},
			{"RestartAmnesia", func() error { return n.RestartAmnesia(tctx(t, 5*time.Second)) }, false},
			{"Replace", func() error { return n.Replace(tctx(t, 5*time.Second)) }, false},
		} {
			setKey(t, rdb, "kept", 0)
			mustDo(t, restart.name, restart.do())
			si := readInfo(t, rdb)
			assert.False(t, seen[si.runID], "%s: run_id %s seen before", restart.name, si.runID)
			seen[si.runID] = true
			assert.Less(t, si.uptime, 5, "%s: uptime starts again", restart.name)
			assert.Equal(t, "noeviction", si.policy, "%s: a start brings the default policy back", restart.name)
			assert.Equal(t, restart.kept, getKey(t, rdb, "kept") == "v", "%s keeps the data: %v", restart.name, restart.kept)
		}

		mustDo(t, "SetMaxmemoryPolicy", n.SetMaxmemoryPolicy(tctx(t, 2*time.Second), "allkeys-lru"))
		mustDo(t, "HealAll", c.HealAll(tctx(t, 5*time.Second)))
		assert.Equal(t, "noeviction", readInfo(t, rdb).policy, "HealAll brings the default policy back")
	})
}

// A fresh server (Replace) has lost the scripts loaded into the old one.
func TestNodeReplaceForgetsScripts(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		n, rdb := oneNode(t, ClusterOptions{Backend: b})
		sha, err := rdb.ScriptLoad(tctx(t, 2*time.Second), "return 1").Result()
		mustDo(t, "SCRIPT LOAD", err)
		mustDo(t, "Replace", n.Replace(tctx(t, 5*time.Second)))
		err = rdb.EvalSha(tctx(t, 2*time.Second), sha, nil).Err()
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), "NOSCRIPT"), "EVALSHA after Replace: %v", err)
	})
}

// In-process INFO takes section names as redis-server does: none, one, or
// several in any case, "default"/"all"/"everything" for every section, and
// an unknown one adds nothing. Each requested section appears once, in
// redis-server's order, and no other.
func TestInfoText_Sections(t *testing.T) {
	st := infoState{runID: strings.Repeat("ab", 20), uptime: 90 * time.Second, policy: "noeviction", addr: "127.0.0.1:6379"}
	headers := map[string]string{"server": "# Server", "clients": "# Clients", "memory": "# Memory", "stats": "# Stats"}
	rapid.Check(t, func(t *rapid.T) {
		names := rapid.SliceOfN(rapid.SampledFrom([]string{"server", "SERVER", "Memory", "clients", "stats", "default", "all", "everything", "nosuch", "persistence"}), 0, 4).Draw(t, "sections")
		want := map[string]bool{}
		for _, s := range names {
			switch s = strings.ToLower(s); s {
			case "default", "all", "everything":
				for _, x := range infoSections {
					want[x] = true
				}
			default:
				want[s] = true
			}
		}
		text := infoText(st, names)
		last := -1
		for _, s := range infoSections {
			at := strings.Index(text, headers[s])
			if !want[s] && len(names) > 0 {
				if at >= 0 {
					t.Fatalf("INFO %v has section %s:\n%s", names, s, text)
				}
				continue
			}
			if at < 0 || strings.Count(text, headers[s]) != 1 {
				t.Fatalf("INFO %v: section %s missing or repeated:\n%s", names, s, text)
			}
			if at < last {
				t.Fatalf("INFO %v: section %s out of order:\n%s", names, s, text)
			}
			last = at
		}
		if want["server"] || len(names) == 0 {
			if v, _ := infoField(text, "uptime_in_seconds"); v != "90" {
				t.Fatalf("uptime_in_seconds %q, want 90", v)
			}
			if v, _ := infoField(text, "tcp_port"); v != "6379" {
				t.Fatalf("tcp_port %q, want 6379", v)
			}
		}
	})
}

// RestartFromSnapshot brings the node back as it was at Snapshot: the keys
// written since are gone, those deleted since are back, a key whose expiry
// passed meanwhile is gone and one that has time left keeps its expiry
// instant; every type the library writes (strings, hashes) survives; the
// server is a new run. Without a snapshot (or after HealAll) it refuses.
func TestNodeRestartFromSnapshot(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		for _, persistence := range []bool{false, true} {
			t.Run("persistence="+strconv.FormatBool(persistence), func(t *testing.T) {
				c := newTestCluster(t, ClusterOptions{Backend: b, Nodes: 1, Persistence: persistence})
				n := c.Node(0)
				rdb := nodeRedis(t, n.Addr())
				ctx := tctx(t, 10*time.Second)
				err := n.RestartFromSnapshot(ctx)
				require.ErrorIs(t, err, ErrNoSnapshot)
				mustDo(t, "RestartAmnesia", n.RestartAmnesia(ctx)) // it was left killed

				setKey(t, rdb, "old", 0)
				setKey(t, rdb, "doomed", 300*time.Millisecond)
				setKey(t, rdb, "later", time.Minute)
				mustDo(t, "HSET", rdb.HSet(ctx, "epoch", "born", "1", "trusted", "1").Err())
				run := readInfo(t, rdb).runID
				mustDo(t, "Snapshot", n.Snapshot(ctx))
				setKey(t, rdb, "new", 0)
				mustDo(t, "DEL", rdb.Del(ctx, "old").Err())
				time.Sleep(400 * time.Millisecond)

				mustDo(t, "RestartFromSnapshot", n.RestartFromSnapshot(ctx))
				assert.NotEqual(t, run, readInfo(t, rdb).runID)
				assert.Equal(t, "v", getKey(t, rdb, "old"), "deleted after the snapshot: back")
				assert.Empty(t, getKey(t, rdb, "new"), "written after the snapshot: lost")
				assert.Empty(t, getKey(t, rdb, "doomed"), "expired while down: gone")
				ttl, err := rdb.PTTL(ctx, "later").Result()
				mustDo(t, "PTTL", err)
				assert.True(t, ttl > 50*time.Second && ttl < time.Minute, "PTTL later = %v", ttl)
				h, err := rdb.HGetAll(ctx, "epoch").Result()
				mustDo(t, "HGETALL", err)
				assert.Equal(t, map[string]string{"born": "1", "trusted": "1"}, h)

				mustDo(t, "HealAll", c.HealAll(ctx))
				require.ErrorIs(t, n.RestartFromSnapshot(ctx), ErrNoSnapshot, "HealAll drops the snapshot")
				mustDo(t, "HealAll", c.HealAll(ctx))
			})
		}
	})
}

// EvictKey deletes one key and leaves the others, and shows the node as one
// that may evict; the faults that need a running node say so on a killed
// one.
func TestNodeEvictKey(t *testing.T) {
	eachBackend(t, func(t *testing.T, b Backend) {
		n, rdb := oneNode(t, ClusterOptions{Backend: b})
		ctx := tctx(t, 10*time.Second)
		setKey(t, rdb, "lock", time.Minute)
		setKey(t, rdb, "counter", 0)
		mustDo(t, "EvictKey", n.EvictKey(ctx, "lock"))
		assert.Empty(t, getKey(t, rdb, "lock"))
		assert.Equal(t, "v", getKey(t, rdb, "counter"))
		assert.Equal(t, "allkeys-lru", readInfo(t, rdb).policy)

		mustDo(t, "Kill", n.Kill())
		for name, err := range map[string]error{
			"EvictKey":           n.EvictKey(ctx, "counter"),
			"Snapshot":           n.Snapshot(ctx),
			"SetMaxmemoryPolicy": n.SetMaxmemoryPolicy(ctx, "allkeys-lru"),
		} {
			assert.True(t, errors.Is(err, ErrNodeDown), "%s on a killed node: %v", name, err)
		}
	})
}
