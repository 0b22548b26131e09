package chaos

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// defaultPolicy is a server's maxmemory_policy until SetMaxmemoryPolicy
// changes it, and again after every start: redis-server's default.
const defaultPolicy = "noeviction"

// newRunID returns a random run_id of 40 hex digits, as redis-server makes
// one on every start.
func newRunID() string {
	var b [20]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// infoState is what an in-process node's INFO reports.
type infoState struct {
	runID   string
	uptime  time.Duration // on the node's clock, since its last start
	policy  string        // maxmemory_policy
	addr    string        // the server's own address, for tcp_port
	clients int           // connected_clients
	conns   int           // total_connections_received
	cmds    int           // total_commands_processed
}

// The INFO sections an in-process node answers, in redis-server's order.
var infoSections = []string{"server", "clients", "memory", "stats"}

// infoText is an in-process node's answer to INFO with args, in
// redis-server's format ("# Server\r\nfield:value\r\n...", sections apart
// by an empty line): the server section (redis_version, run_id, tcp_port,
// uptime_in_seconds, uptime_in_days, process_id), clients
// (connected_clients), memory (maxmemory 0, maxmemory_policy) and stats
// (total_connections_received, total_commands_processed). Like
// redis-server it takes any number of section names in any case; no name,
// "default", "all" or "everything" give every section, and an unknown
// name adds nothing.
func infoText(st infoState, args []string) string {
	want := map[string]bool{}
	for _, a := range args {
		switch a = strings.ToLower(a); a {
		case "default", "all", "everything":
			for _, s := range infoSections {
				want[s] = true
			}
		default:
			want[a] = true
		}
	}
	if len(args) == 0 {
		for _, s := range infoSections {
			want[s] = true
		}
	}
	_, port, _ := net.SplitHostPort(st.addr)
	uptime := int64(max(st.uptime, 0) / time.Second)
	var parts []string
	for _, s := range infoSections {
		if !want[s] {
			continue
		}
		var lines []string
		switch s {
		case "server":
			lines = []string{"# Server", "redis_version:7.0.0", "redis_mode:standalone", "executable:miniredis",
				fmt.Sprintf("process_id:%d", os.Getpid()), "run_id:" + st.runID, "tcp_port:" + port,
				fmt.Sprintf("uptime_in_seconds:%d", uptime), fmt.Sprintf("uptime_in_days:%d", uptime/86400)}
		case "clients":
			lines = []string{"# Clients", fmt.Sprintf("connected_clients:%d", st.clients)}
		case "memory":
			lines = []string{"# Memory", "maxmemory:0", "maxmemory_policy:" + st.policy}
		case "stats":
			lines = []string{"# Stats", fmt.Sprintf("total_connections_received:%d", st.conns), fmt.Sprintf("total_commands_processed:%d", st.cmds)}
		}
		parts = append(parts, strings.Join(lines, "\r\n")+"\r\n")
	}
	return strings.Join(parts, "\r\n")
}

// infoField returns field's value in an INFO reply, and whether it is there.
func infoField(info, field string) (string, bool) {
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if ok && k == field {
			return v, true
		}
	}
	return "", false
}
