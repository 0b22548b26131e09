package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
	"github.com/d3b93e30/redlock/internal/redisserver"
)

// requirePass sets a password on a running server.
func requirePass(t *testing.T, s *redisserver.Server, password string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true})
	defer c.Close()
	require.NoError(t, c.ConfigSet(context.Background(), "requirepass", password).Err())
}

// A failed acquisition says what each node answered, never a
// password.
func TestExec_SaysWhatEachNodeAnswered(t *testing.T) {
	servers, _ := startNodes(t, 5)
	const password = "hunter2-secret"
	requirePass(t, servers[0], password)
	requirePass(t, servers[1], password)
	require.NoError(t, servers[2].Kill())
	require.NoError(t, servers[3].Stop())
	nodes := strings.Join([]string{
		"redis://:wrong-" + password + "@" + servers[0].Addr(), // WRONGPASS
		servers[1].Addr(), // no password: NOAUTH
		servers[2].Addr(), // killed: connection refused
		servers[3].Addr(), // stopped: timeout
		servers[4].Addr(),
	}, ",")
	var stdout, stderr bytes.Buffer
	code := runExec(context.Background(), []string{"--nodes", nodes, "--key", "k", "--node-timeout", "300ms", "--", "true"}, &stdout, &stderr)
	out := stderr.String()
	assert.Equal(t, exitUnavailable, code, out)
	for _, want := range []string{
		servers[0].Addr() + "/0: error: WRONGPASS",
		servers[1].Addr() + "/0: error: NOAUTH",
		servers[2].Addr() + "/0: unreachable: ", "connection refused",
		servers[3].Addr() + "/0: pending: no answer yet", // the vote was lost before its timeout
		servers[4].Addr() + "/0: ",
		"(3 of 5 nodes needed)",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, password)

	// A stopped node whose answer the vote needs times out.
	stdout.Reset()
	stderr.Reset()
	code = runExec(context.Background(), []string{"--nodes", strings.Join([]string{servers[1].Addr(), servers[3].Addr(), servers[4].Addr()}, ","),
		"--key", "k", "--node-timeout", "300ms", "--", "true"}, &stdout, &stderr)
	assert.Equal(t, exitUnavailable, code, stderr.String())
	assert.Contains(t, stderr.String(), servers[3].Addr()+"/0: timed-out: ")
	assert.Contains(t, stderr.String(), servers[1].Addr()+"/0: error: NOAUTH")

	stdout.Reset()
	stderr.Reset()
	code = runStatus(context.Background(), []string{"--nodes", nodes, "--key", "k", "--timeout", "300ms", "--json"}, &stdout, &stderr)
	assert.Equal(t, exitUnavailable, code, stderr.String())
	assert.NotContains(t, stdout.String(), password)
	assert.Contains(t, stdout.String(), "WRONGPASS")
	assert.Contains(t, stdout.String(), "NOAUTH")
}

// A node that had not answered when the vote was decided is asked again, so
// that the message says what every node answers: a wrong password on all
// three nodes shows WRONGPASS three times, not twice and a "pending".
func TestExec_PendingNodesAreAskedAgain(t *testing.T) {
	servers, _ := startNodes(t, 3)
	const password = "hunter2-secret"
	var urls []string
	for _, s := range servers {
		requirePass(t, s, password)
		urls = append(urls, "redis://:wrong-"+password+"@"+s.Addr())
	}
	var stdout, stderr bytes.Buffer
	code := runExec(context.Background(), []string{"--nodes", strings.Join(urls, ","), "--key", "k", "--node-timeout", "300ms", "--", "true"}, &stdout, &stderr)
	out := stderr.String()
	assert.Equal(t, exitUnavailable, code, out)
	perNode := 0 // the node lines; the last line says what to fix
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "  ") && strings.Contains(l, "WRONGPASS") {
			perNode++
		}
	}
	assert.Equal(t, 3, perNode, out)
	assert.Contains(t, out, "refused the username or password", out)
	assert.NotContains(t, out, password)
}

// A majority of the nodes answering what no retry fixes (here, a password
// missing on two of three) ends exec at once, not after --wait, with the
// library's words for what to fix.
func TestExec_MisconfiguredSaysWhatToFixAtOnce(t *testing.T) {
	servers, _ := startNodes(t, 3)
	requirePass(t, servers[0], "hunter2-secret")
	requirePass(t, servers[1], "hunter2-secret")
	nodes := strings.Join([]string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, ",")
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := runExec(context.Background(), []string{"--nodes", nodes, "--key", "k", "--wait", "30s", "--", "true"}, &stdout, &stderr)
	out := stderr.String()
	assert.Equal(t, exitUnavailable, code, out)
	assert.Less(t, time.Since(start), 15*time.Second, "not retried for --wait: %s", out)
	assert.Contains(t, out, "retrying cannot fix (not retried)", out)
	assert.Contains(t, out, "requires a password: set it in the URL", out)
}

// One server named twice, by another spelling or another
// database number, is refused at first contact as bad usage.
func TestExec_SameServerTwice(t *testing.T) {
	servers, _ := startNodes(t, 2)
	p0, p1 := servers[0].Port(), servers[1].Port()
	for _, nodes := range []string{
		fmt.Sprintf("127.0.0.1:%d,localhost:%d,127.0.0.1:%d", p0, p0, p1),
		fmt.Sprintf("redis://127.0.0.1:%d/0,redis://127.0.0.1:%d/1,127.0.0.1:%d", p0, p0, p1),
	} {
		var stdout, stderr bytes.Buffer
		code := runExec(context.Background(), []string{"--nodes", nodes, "--key", "k", "--", "true"}, &stdout, &stderr)
		assert.Equal(t, exitUsage, code, stderr.String())
		assert.Contains(t, stderr.String(), "node 1 (127.0.0.1:")
		assert.Contains(t, stderr.String(), "are the same Redis server")

		stderr.Reset()
		code = runStatus(context.Background(), []string{"--nodes", nodes, "--key", "k"}, &stdout, &stderr)
		assert.Equal(t, exitUsage, code, stderr.String())
		assert.Contains(t, stderr.String(), "same Redis server")

		// elect campaigns beside the first contact; the server's two
		// votes elect it, and it resigns before COMMAND starts.
		stderr.Reset()
		code = runElect(context.Background(), []string{"--nodes", nodes, "--name", "twice", "--", "sh", "-c", "echo ran"}, &stdout, &stderr)
		assert.Equal(t, exitUsage, code, stderr.String())
		assert.Contains(t, stderr.String(), "are the same Redis server")
		assert.NotContains(t, stdout.String(), "ran")
	}
	// Another address of one server (0.0.0.0 reaches the loopback server)
	// is found by its run_id: status waits for every node's.
	var out, errOut bytes.Buffer
	code := runStatus(context.Background(), []string{"--nodes", fmt.Sprintf("127.0.0.1:%d,0.0.0.0:%d,127.0.0.1:%d", p0, p0, p1), "--key", "k"}, &out, &errOut)
	assert.Equal(t, exitUsage, code, errOut.String())
	assert.Contains(t, errOut.String(), "are the same Redis server (run_id ")

	// Distinct servers, one spelled host:port and one as a URL, are fine.
	var stdout, stderr bytes.Buffer
	code = runStatus(context.Background(), []string{"--nodes", fmt.Sprintf("localhost:%d,redis://127.0.0.1:%d", p0, p1), "--key", "k"}, &stdout, &stderr)
	assert.Equal(t, 0, code, stderr.String())
}

// A busy run prints nothing (cron mails any output) unless -v.
func TestExec_BusyIsQuiet(t *testing.T) {
	bin := redlockBinary(t)
	_, nodes := startNodes(t, 3)
	dir := t.TempDir()
	started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	holder := startRedlock(t, bin, nodes, "exec", "--key", "cron", "--",
		"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done`, started, stop)
	holder.waitFile(t, started)

	quiet := startRedlock(t, bin, nodes, "exec", "--key", "cron", "--busy-exit", "0", "--", "echo", "ran")
	assert.Equal(t, 0, quiet.wait(t))
	assert.Empty(t, quiet.stderr.String())
	assert.Empty(t, quiet.stdout.String())

	verbose := startRedlock(t, bin, nodes, "exec", "--key", "cron", "-v", "--", "echo", "ran")
	assert.Equal(t, exitBusy, verbose.wait(t))
	assert.Contains(t, verbose.stderr.String(), "lock busy")
	assert.Empty(t, verbose.stdout.String())

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	assert.Equal(t, 0, holder.wait(t), holder.stderr.String())
}

// Status names the holder (host, pid, since), a record that
// follows the lock's extensions and is deleted on release.
func TestStatus_ShowsTheHolder(t *testing.T) {
	bin := redlockBinary(t)
	servers, nodes := startNodes(t, 3)
	dir := t.TempDir()
	started, stop := filepath.Join(dir, "started"), filepath.Join(dir, "stop")
	before := time.Now().UTC().Truncate(time.Second)
	// The per-node timeout leaves room for a loaded machine: a release's
	// delete that timed out would leave the keys until their TTL.
	r := startRedlock(t, bin, nodes, "exec", "--key", "report", "--ttl", "1500ms", "--node-timeout", "500ms", "--",
		"sh", "-c", `touch "$0"; while [ ! -e "$1" ]; do sleep 0.05; done`, started, stop)
	r.waitFile(t, started)
	// Past the first TTL: the record lives on with the lock's extensions.
	time.Sleep(2 * time.Second)

	host, err := os.Hostname()
	require.NoError(t, err)
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runStatus(context.Background(), []string{"--nodes", nodes, "--key", "report"}, &stdout, &stderr), stderr.String())
	assert.Contains(t, stdout.String(), fmt.Sprintf("holder: host %s, pid %d, since ", host, r.cmd.Process.Pid))

	stdout.Reset()
	require.Equal(t, 0, runStatus(context.Background(), []string{"--nodes", nodes, "--key", "report", "--json"}, &stdout, &stderr))
	var js statusJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &js), stdout.String())
	require.NotNil(t, js.Holder, stdout.String())
	assert.Equal(t, host, js.Holder.Host)
	assert.Equal(t, r.cmd.Process.Pid, js.Holder.PID)
	assert.False(t, js.Holder.Since.Before(before), "since %v, started after %v", js.Holder.Since, before)

	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	require.Equal(t, 0, r.wait(t), r.stderr.String())
	for _, s := range servers {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), Protocol: 2, DisableIdentity: true})
		n, err := c.Exists(context.Background(), "{report}:holder", "report").Result()
		c.Close()
		require.NoError(t, err)
		assert.Zero(t, n, "lock and holder record deleted on release")
	}
}

func TestHolderKey_SharesTheLockSlot(t *testing.T) {
	assert.Equal(t, "{job}:holder", holderKey("job"))
	assert.Equal(t, "lock:{42}:holder", holderKey("lock:{42}"))
	assert.Equal(t, "{a{}b}:holder", holderKey("a{}b"))
}

// In --json a node that did not answer is unknown, never free.
func TestStatus_JSONUnknownNode(t *testing.T) {
	servers, nodes := startNodes(t, 3)
	require.NoError(t, servers[2].Kill())
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runStatus(context.Background(), []string{"--nodes", nodes, "--key", "job", "--json", "--timeout", "300ms"}, &stdout, &stderr), stderr.String())
	var raw struct {
		Held  *bool            `json:"held"`
		Nodes []map[string]any `json:"nodes"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &raw), stdout.String())
	require.Len(t, raw.Nodes, 3)
	dead := raw.Nodes[2]
	assert.Equal(t, "unknown", dead["state"])
	assert.Contains(t, dead, "held")
	assert.Nil(t, dead["held"], "not false")
	assert.Nil(t, dead["fence"], "not 0")
	assert.Equal(t, "unknown", dead["quarantine"])
	assert.Contains(t, dead["error"], "connection refused")
	assert.Equal(t, false, raw.Nodes[0]["held"])
	assert.Equal(t, "free", raw.Nodes[0]["state"])
	require.NotNil(t, raw.Held, "2 of 3 answered free: not held for sure")
	assert.False(t, *raw.Held)

	// With two of three nodes silent the lock's state is unknown.
	require.NoError(t, servers[1].Kill())
	stdout.Reset()
	runStatus(context.Background(), []string{"--nodes", nodes, "--key", "job", "--json", "--timeout", "300ms"}, &stdout, &stderr)
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &raw))
	assert.Nil(t, raw.Held, stdout.String())
	assert.Contains(t, stdout.String(), `"summary": "unknown: `)
}

// guardState names each amnesia-guard state the status table shows.
func TestGuardState(t *testing.T) {
	q := time.Minute
	for _, tc := range []struct {
		st   redlock.NodeState
		want string
	}{
		{redlock.NodeState{Err: errors.New("down")}, "?"},
		{redlock.NodeState{EpochAge: -1}, "no epoch"},
		{redlock.NodeState{EpochAge: time.Hour, Trusted: true}, "trusted"},
		{redlock.NodeState{EpochAge: 20 * time.Second}, "quarantined, 40s left"},
		{redlock.NodeState{EpochAge: 20 * time.Second, Void: true}, "void, 40s left"},
		{redlock.NodeState{EpochAge: 2 * time.Minute, Void: true}, "quarantine over, counter not vouched for"},
		{redlock.NodeState{EpochAge: 2 * time.Minute}, "quarantine over, counter not vouched for"},
	} {
		assert.Equal(t, tc.want, guardState(tc.st, q), "%+v", tc.st)
	}
}

// An election's owner value shows the leader's identity whole (an identity
// may hold "#" itself) and only the first characters of its secret part;
// any other owner value only its first characters.
func TestOwnerText(t *testing.T) {
	random, err := redlock.RandomOwner()
	require.NoError(t, err)
	for _, tc := range []struct{ owner, text, identity string }{
		{"worker-17.example.com:4242#" + random, "worker-17.example.com:4242#" + random[:6] + "…", "worker-17.example.com:4242"},
		{"a#b#" + random, "a#b#" + random[:6] + "…", "a#b"},
		{random, random[:6] + "…", ""},
		{"secret-value#short", "secret…", ""}, // not an election's: no random part
		{"#" + random, "#" + random[:5] + "…", ""},
		{"", "-", ""},
	} {
		assert.Equal(t, tc.text, ownerText(tc.owner), tc.owner)
		assert.Equal(t, tc.identity, ownerIdentity(tc.owner), tc.owner)
	}
}

// status on an election's key names the leader by its whole identity, in
// the table and in --json (which decodes into the documented shape), and
// never shows the owner value's secret part.
func TestStatus_ShowsTheLeaderWhole(t *testing.T) {
	_, nodes := startNodes(t, 3)
	urls, err := redlock.ParseNodes(nodes)
	require.NoError(t, err)
	c, err := redlock.Dial(urls, redlock.WithoutAmnesiaGuard())
	require.NoError(t, err)
	defer c.Close()
	ctx := context.Background()
	const identity = "worker-17.example.com:4242"
	l, err := c.Campaign(ctx, "scheduler", identity, time.Minute)
	require.NoError(t, err)
	defer l.Resign(ctx)
	key := redlock.ElectionKey("scheduler")

	// The straggler's SET lands in the background: wait for all three.
	var out string
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out, "on 3 of 3 nodes") && time.Now().Before(deadline) {
		var stdout, stderr bytes.Buffer
		require.Equal(t, 0, runStatus(ctx, []string{"--nodes", nodes, "--key", key}, &stdout, &stderr), stderr.String())
		out = stdout.String()
	}
	assert.Contains(t, out, "held by "+identity+"#", out)
	assert.Equal(t, 3+1, strings.Count(out, identity+"#"), "the summary and each node's row: %s", out)
	assert.NotContains(t, out, "worker…")

	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, runStatus(ctx, []string{"--nodes", nodes, "--key", key, "--json"}, &stdout, &stderr), stderr.String())
	dec := json.NewDecoder(&stdout)
	dec.DisallowUnknownFields() // every field is in statusJSON, as documented
	var js statusJSON
	require.NoError(t, dec.Decode(&js))
	assert.Equal(t, key, js.Key)
	assert.Equal(t, 2, js.Quorum)
	require.NotNil(t, js.Held)
	assert.True(t, *js.Held)
	assert.Equal(t, identity, js.Identity)
	assert.True(t, strings.HasPrefix(js.Owner, identity+"#"), js.Owner)
	assert.Nil(t, js.Holder, "Campaign keeps no holder record")
	require.Len(t, js.Nodes, 3)
	for _, n := range js.Nodes {
		assert.Equal(t, "held", n.State)
		assert.Equal(t, identity, n.Identity)
		assert.Equal(t, js.Owner, n.Owner)
		require.NotNil(t, n.TTLMs)
		assert.Greater(t, *n.TTLMs, int64(0))
		require.NotNil(t, n.Fence) // a straggler's counter is written back in the background
		assert.Positive(t, *n.Fence)
	}
	lead, err := c.Leader(ctx, "scheduler")
	require.NoError(t, err)
	assert.Equal(t, lead.Identity, js.Identity, "status and Client.Leader agree")
}
