package bench

import (
	"bufio"
	"context"
	"strconv"
	"strings"
	"testing"
)

// nodeStats is what the nodes spent, summed over the live nodes of a case:
// read before and after a timed run, the difference per operation is what
// the nodes pay for one acquire + release.
type nodeStats struct {
	// cmdUsec is INFO commandstats' usec (time inside command handlers)
	// per command name. A command a Lua script runs is counted under its
	// own name and again inside the script's EVALSHA, so the per-library
	// total (cmdUsec) counts only the commands the library sends itself.
	cmdUsec map[string]int64
	// cpuUsec is INFO cpu's used_cpu_user + used_cpu_sys: the node
	// processes' CPU time, network reads and writes included.
	cpuUsec int64
}

// directCommands are the commands each library sends to a node itself
// (lower case, as INFO commandstats names them), the others being the
// ones its scripts run. Ours sends only scripts (and pub/sub commands
// while a waiter waits); redsync sends SET NX and a delete script; the
// floor SET and DEL; the limit PING.
func directCommands(kind Kind) []string {
	scripts := []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "script"}
	switch kind {
	case Ours, OursNoFence, OursNoGuard:
		return append(scripts, "subscribe", "unsubscribe", "ping")
	case RedsyncTuned, RedsyncDefault, Redislock:
		return append(scripts, "set")
	case Floor:
		return []string{"set", "del"}
	case Limit:
		return []string{"ping"}
	}
	return scripts
}

// cmdUsecOf sums the usec of the commands kind sends itself.
func (s nodeStats) cmdUsecOf(kind Kind) int64 {
	var t int64
	for _, c := range directCommands(kind) {
		t += s.cmdUsec[c]
	}
	return t
}

// add returns s plus d, whose own commands (those kind sent) are summed
// under the name "own".
func (s nodeStats) add(d nodeStats, kind Kind) nodeStats {
	if s.cmdUsec == nil {
		s.cmdUsec = map[string]int64{}
	}
	s.cmdUsec["own"] += d.cmdUsecOf(kind)
	s.cpuUsec += d.cpuUsec
	return s
}

// sub returns s - o.
func (s nodeStats) sub(o nodeStats) nodeStats {
	d := nodeStats{cmdUsec: map[string]int64{}, cpuUsec: s.cpuUsec - o.cpuUsec}
	for k, v := range s.cmdUsec {
		d.cmdUsec[k] = v - o.cmdUsec[k]
	}
	return d
}

// readNodeStats reads INFO commandstats and INFO cpu of every live server
// of srv and sums them.
func readNodeStats(ctx context.Context, srv []*Server) (nodeStats, error) {
	st := nodeStats{cmdUsec: map[string]int64{}}
	for _, s := range srv {
		if !s.Running() {
			continue
		}
		info, err := admin(s.Addr()).Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return st, err
		}
		parseNodeInfo(info, &st)
	}
	return st, nil
}

// parseNodeInfo adds the figures of one node's INFO commandstats and cpu
// sections to st.
func parseNodeInfo(info string, st *nodeStats) {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			for _, f := range strings.Split(fields, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					st.cmdUsec[name] += n
				}
			}
			continue
		}
		for _, p := range []string{"used_cpu_user:", "used_cpu_sys:"} {
			if v, ok := strings.CutPrefix(line, p); ok {
				f, _ := strconv.ParseFloat(v, 64)
				st.cpuUsec += int64(f * 1e6)
			}
		}
	}
}

// TestParseNodeInfo: the usec of each command and the CPU time are summed
// over nodes, and the per-library total counts only its own commands.
func TestParseNodeInfo(t *testing.T) {
	node := "# Commandstats\r\ncmdstat_set:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=2,usec=100,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n" +
		"# CPU\r\nused_cpu_sys:0.001500\r\nused_cpu_user:0.002000\r\nused_cpu_sys_children:1.000000\r\nused_cpu_sys_main_thread:1.000000\r\n"
	var st nodeStats
	st.cmdUsec = map[string]int64{}
	parseNodeInfo(node, &st)
	parseNodeInfo(node, &st)
	if st.cmdUsec["set"] != 60 || st.cmdUsec["evalsha"] != 200 || st.cpuUsec != 7000 {
		t.Fatalf("got %v, cpu %d µs; want set 60, evalsha 200, cpu 7000", st.cmdUsec, st.cpuUsec)
	}
	if got := st.cmdUsecOf(Ours); got != 200 {
		t.Errorf("ours: %d µs, want 200 (the scripts only)", got)
	}
	if got := st.cmdUsecOf(RedsyncTuned); got != 260 {
		t.Errorf("redsync: %d µs, want 260 (SET and the scripts)", got)
	}
}
