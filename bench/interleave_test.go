package bench

// TestInterleavedC1 is case 1 measured another way (not part of run.sh):
// the configurations over the same 5 nodes, one operation each in turn (the
// order rotating every round), so that the machine's drift, which moves a
// run.sh figure by a third from one sub-benchmark to the next on a shared
// 2-core machine, hits them alike. It logs each one's p50 and its ratio to
// the floor, and the time redis-server spent in each command (SLOWLOG with
// every command logged, with REDLOCK_DIAG_SLOWLOG=1, which slows the nodes;
// the acquire script split by its fencing argument, so a write-back would
// show as a script of its own).
//
//	cd bench && REDLOCK_DIAG=3000 go test -run TestInterleavedC1 -v .
//	REDLOCK_DIAG_RING=16 ...   # 16 names per lane, locked again and again
//	REDLOCK_DIAG_KINDS=ours,floor ...
//
// By default every operation locks a name for the first time, as case 1
// does (its fencing counter is created and seeded on every node). Its
// nodes are started for it and not made old (bench_test.go, ageNodes):
// for ours the per-key rule decides every fresh grant, as in a cluster's
// first longest TTL.

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestInterleavedC1(t *testing.T) {
	rounds, _ := strconv.Atoi(os.Getenv("REDLOCK_DIAG"))
	if rounds == 0 {
		t.Skip("REDLOCK_DIAG=<rounds> not set")
	}
	ctx := context.Background()
	var srv []*Server
	for range 5 {
		s, err := StartServer(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		srv = append(srv, s)
	}
	addrs := addrsOf(srv)
	kinds := []Kind{Ours, OursNoFence, Floor, RedsyncTuned}
	if k := os.Getenv("REDLOCK_DIAG_KINDS"); k != "" {
		kinds = nil
		for _, s := range strings.Split(k, ",") {
			kinds = append(kinds, Kind(s))
		}
	}
	ims := make([]Impl, len(kinds))
	for i, k := range kinds {
		im, err := NewImpl(k, addrs)
		if err != nil {
			t.Fatal(err)
		}
		defer im.Close()
		ims[i] = im
		for j := range 10 {
			if _, _, err := im.Op(ctx, lanes[i][keyRing-1-j]); err != nil {
				t.Fatal(err)
			}
		}
	}
	slowlog := os.Getenv("REDLOCK_DIAG_SLOWLOG") != ""
	for _, s := range srv {
		if !slowlog {
			break
		}
		a := AdminClient(s.Addr())
		a.ConfigSet(ctx, "slowlog-log-slower-than", "0")
		a.ConfigSet(ctx, "slowlog-max-len", "100000")
		a.SlowLogReset(ctx)
		a.ConfigResetStat(ctx)
		a.Close()
	}
	ring := keyRing - 16
	if v, _ := strconv.Atoi(os.Getenv("REDLOCK_DIAG_RING")); v > 0 {
		ring = v
	}
	total := make([][]time.Duration, len(kinds))
	acq := make([][]time.Duration, len(kinds))
	rel := make([][]time.Duration, len(kinds))
	for r := range rounds {
		for j := range kinds {
			i := (j + r) % len(kinds) // rotate the order
			t0 := time.Now()
			a, l, err := ims[i].Op(ctx, lanes[i][r%ring])
			total[i] = append(total[i], time.Since(t0))
			acq[i], rel[i] = append(acq[i], a), append(rel[i], l)
			if err != nil {
				t.Errorf("%s: %v", kinds[i], err)
			}
		}
	}
	time.Sleep(200 * time.Millisecond)
	base := time.Duration(0)
	if i := slices.Index(kinds, Floor); i >= 0 {
		base = percentile(slices.Clone(total[i]), 50)
	}
	for i, k := range kinds {
		p50 := percentile(total[i], 50)
		t.Logf("%-14s p50 %7.1f µs (%.2f × floor) p90 %7.1f acq p50 %6.1f rel p50 %6.1f",
			k, us(p50), float64(p50)/float64(base), us(percentile(total[i], 90)), us(percentile(acq[i], 50)), us(percentile(rel[i], 50)))
	}
	if !slowlog {
		return
	}
	// Server time per command name (EVALSHA split by script hash and the
	// fencing flag), from SLOWLOG on every node.
	type agg struct {
		n   int
		sum time.Duration
		d   []time.Duration
	}
	by := map[string]*agg{}
	for _, s := range srv {
		a := AdminClient(s.Addr())
		logs, err := a.SlowLogGet(ctx, -1).Result()
		a.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range logs {
			name := strings.ToLower(l.Args[0])
			if name == "evalsha" && len(l.Args) > 1 {
				name += " " + l.Args[1][:8]
				if len(l.Args) == 13 { // acquire: 3 keys + 7 args
					name += " fence=" + l.Args[10]
				}
			}
			g := by[name]
			if g == nil {
				g = &agg{}
				by[name] = g
			}
			g.n++
			g.sum += l.Duration
			g.d = append(g.d, l.Duration)
		}
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		g := by[n]
		t.Logf("server %-32s n=%6d mean %6.2f µs p50 %6.2f µs", n, g.n, us(g.sum)/float64(g.n), us(percentile(g.d, 50)))
	}
}
