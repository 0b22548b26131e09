package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// warnings returns the warning lines of a run's stderr.
func warnings(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(l, "redlock exec: warning: ") {
			out = append(out, l)
		}
	}
	return out
}

// A degraded cluster shows on stderr: one node of three with a wrong
// password, or a host that does not resolve, gets one warning line, in the
// words `redlock status` shows, whether the lock was taken (exit 0) or
// found busy with --busy-exit 0, and with -v; --no-warnings silences it.
// Before, exec exited 0 and printed nothing, and -v showed the node as
// "pending" at best.
func TestExec_WarnsOfFailingNodes(t *testing.T) {
	servers, _ := startNodes(t, 3)
	const password = "hunter2-secret"
	requirePass(t, servers[0], password)
	good := strings.Join([]string{"redis://:" + password + "@" + servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, ",")
	wrongPass := strings.Join([]string{"redis://:wrong-" + password + "@" + servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}, ",")
	noHost := strings.Join([]string{servers[1].Addr(), "no-such-host.invalid:6379", servers[2].Addr()}, ",")
	ctx := context.Background()
	exec := func(nodes string, args ...string) (int, string) {
		var stdout, stderr bytes.Buffer
		args = append([]string{"--nodes", nodes, "--key", "job", "--node-timeout", "500ms"}, args...)
		code := runExec(ctx, append(args, "--", "true"), &stdout, &stderr)
		return code, stderr.String()
	}

	code, out := exec(wrongPass)
	assert.Equal(t, 0, code, out)
	w := warnings(out)
	require.Len(t, w, 1, out)
	assert.Contains(t, w[0], "node "+servers[0].Addr()+"/0: error: WRONGPASS")
	assert.NotContains(t, out, password)
	// status says it in the same words.
	_, reason, _ := strings.Cut(w[0], ": error: ")
	reason, _, _ = strings.Cut(reason, " (at first contact")
	var stdout, stderr bytes.Buffer
	runStatus(ctx, []string{"--nodes", wrongPass, "--key", "job"}, &stdout, &stderr)
	assert.Contains(t, stdout.String(), reason, "status and exec use the same words")

	code, out = exec(noHost)
	assert.Equal(t, 0, code, out)
	w = warnings(out)
	require.Len(t, w, 1, out)
	assert.Contains(t, w[0], "node no-such-host.invalid:6379/0: ")
	assert.Contains(t, w[0], "no-such-host.invalid")

	code, out = exec(wrongPass, "-v")
	assert.Equal(t, 0, code, out)
	assert.Len(t, warnings(out), 1, out)

	for _, nodes := range []string{wrongPass, noHost} {
		code, out = exec(nodes, "--no-warnings")
		assert.Equal(t, 0, code, out)
		assert.Empty(t, out)
	}

	// Busy, with --busy-exit 0: busy is silent, the failing node is not.
	rl, err := redlock.Dial(strings.Split(good, ","))
	require.NoError(t, err)
	defer rl.Close()
	held, err := rl.Acquire(ctx, "job", time.Minute)
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond) // the straggler's SET
	for _, nodes := range []string{wrongPass, noHost} {
		code, out = exec(nodes, "--busy-exit", "0")
		assert.Equal(t, 0, code, out)
		assert.Len(t, warnings(out), 1, out)
		assert.Equal(t, len(warnings(out)), strings.Count(out, "\n"), "nothing but the warning: %s", out)
		code, out = exec(nodes, "--busy-exit", "0", "--no-warnings")
		assert.Equal(t, 0, code, out)
		assert.Empty(t, out)
	}
	require.NoError(t, held.Release(ctx))
}

// replyError is an error reply of a node, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// endedContact is a first contact that has ended on every node: with
// errs[i] on node i, or with run_id ids[i] (nil ids: distinct ones).
func endedContact(names []string, errs []error, ids []string) *firstContact {
	fc := &firstContact{names: names, errs: errs, ids: ids}
	if ids == nil {
		for i := range names {
			fc.ids = append(fc.ids, fmt.Sprintf("run-%d", i))
		}
	}
	for range names {
		c := make(chan struct{})
		close(c)
		fc.done = append(fc.done, c)
	}
	return fc
}

// A node the vote was decided without (pending) is still reported, by its
// answer at first contact, once; a node that answered at first contact,
// or that granted after a failed first contact, is not. A pending node
// whose first contact has not ended is left for later (lateFailures),
// which describes it once it has.
func TestNodeConns_Failures(t *testing.T) {
	var wrongpass redis.Error = replyError("WRONGPASS invalid username-password pair or user is disabled.")
	names := []string{"a:1/0", "b:1/0", "c:1/0", "d:1/0", "e:1/0", "f:1/0"}
	n := &nodeConns{
		names:     names,
		passwords: []string{"hunter2", "", "", "", "", ""},
		contact:   endedContact(names, []error{wrongpass, nil, errors.New("dial tcp: lookup e: no such host hunter2"), nil, context.DeadlineExceeded, nil}, nil),
	}
	n.contact.done[5] = make(chan struct{}) // node f has not answered yet
	got, later := n.failures([]redlock.NodeResult{
		{Node: "a:1/0", Outcome: redlock.OutcomePending},
		{Node: "b:1/0", Outcome: redlock.OutcomePending},
		{Node: "c:1/0", Outcome: redlock.OutcomeGranted},
		{Node: "d:1/0", Outcome: redlock.OutcomeUnreachable, Err: errors.New("dial tcp: connection refused")},
		{Node: "e:1/0", Outcome: redlock.OutcomePending},
		{Node: "f:1/0", Outcome: redlock.OutcomePending},
	})
	assert.Equal(t, []string{
		"node a:1/0: error: WRONGPASS invalid username-password pair or user is disabled. (at first contact; the lock's vote did not wait for it)",
		"node d:1/0: unreachable: dial tcp: connection refused",
		"node e:1/0: timed-out: context deadline exceeded (at first contact; the lock's vote did not wait for it)",
	}, got)
	assert.Equal(t, []int{5}, later)

	n.contact.errs[5] = context.DeadlineExceeded
	close(n.contact.done[5])
	assert.Equal(t, []string{"node f:1/0: timed-out: context deadline exceeded (at first contact; the lock's vote did not wait for it)"}, n.lateFailures(later))
}

// The first contact finds one server named twice among the nodes that have
// answered; wait waits only for the nodes it is given.
func TestFirstContact_Distinct(t *testing.T) {
	names := []string{"a:1/0", "b:1/0", "c:1/0"}
	fc := endedContact(names, make([]error, 3), []string{"x", "y", "x"})
	assert.ErrorIs(t, fc.waitAll(), errSameServer)
	assert.ErrorContains(t, fc.waitAll(), "node 1 (a:1/0) and node 3 (c:1/0) are the same Redis server")

	fc.done[2] = make(chan struct{}) // c has not answered: not waited for, not compared
	assert.NoError(t, fc.wait([]bool{true, true, false}))
	close(fc.done[2])
	assert.ErrorIs(t, fc.wait([]bool{true, true, false}), errSameServer)

	fc = endedContact(names, []error{nil, errors.New("timeout"), nil}, []string{"x", "", "z"})
	assert.NoError(t, fc.waitAll(), "a node that failed is not compared")
}

// Fewer than 3 nodes get a warning (the help asks for an odd number, at
// least 3), which --no-warnings silences; 3 nodes get none.
func TestExec_WarnsOfFewNodes(t *testing.T) {
	servers, _ := startNodes(t, 3)
	ctx := context.Background()
	for _, tc := range []struct {
		n    int
		args []string
		want string
	}{
		{1, nil, "redlock exec: warning: a single node"},
		{2, nil, "redlock exec: warning: 2 nodes: the lock needs both"},
		{2, []string{"--no-warnings"}, ""},
		{3, nil, ""},
	} {
		// A key of its own per case: with the amnesia guard on, a key that
		// one node already knows is quarantined on a node that does not.
		key := fmt.Sprintf("few-%d-%d", tc.n, len(tc.args))
		var addrs []string
		for _, s := range servers[:tc.n] {
			addrs = append(addrs, s.Addr())
		}
		var stdout, stderr bytes.Buffer
		args := append([]string{"--nodes", strings.Join(addrs, ","), "--key", key}, tc.args...)
		code := runExec(ctx, append(args, "--", "true"), &stdout, &stderr)
		assert.Equal(t, 0, code, stderr.String())
		if tc.want == "" {
			assert.Empty(t, stderr.String(), "%d nodes %v", tc.n, tc.args)
		} else {
			assert.Equal(t, 1, strings.Count(stderr.String(), "\n"), stderr.String())
			assert.Contains(t, stderr.String(), tc.want)
			assert.Contains(t, stderr.String(), "at least 3")
		}
	}
}

// An empty entry in the node list ("a,,b", a comma at an end) is refused,
// named by its index (the list may hold passwords), by exec and status,
// from --nodes or $REDLOCK_NODES. Before, it was dropped without a word.
func TestUsage_EmptyNodeEntry(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"empty entry", []string{"exec", "--nodes", "127.0.0.1:1,,127.0.0.1:2", "--key", "k", "--", "true"}, "--nodes: redlock: invalid argument: node 2 of 3 is empty"},
		{"trailing comma", []string{"exec", "--nodes", "redis://:hunter2@127.0.0.1:1,127.0.0.1:2,", "--key", "k", "--", "true"}, "--nodes: redlock: invalid argument: node 3 of 3 is empty"},
		{"status empty entry", []string{"status", "--nodes", ",127.0.0.1:1", "--key", "k"}, "--nodes: redlock: invalid argument: node 1 of 2 is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantUsageError(t, tc.want, tc.args...) })
	}
	t.Setenv("REDLOCK_NODES", "127.0.0.1:1,,127.0.0.1:2")
	wantUsageError(t, "$REDLOCK_NODES: redlock: invalid argument: node 2 of 3 is empty", "exec", "--key", "k", "--", "true")
}
