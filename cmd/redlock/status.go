package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/d3b93e30/redlock"
)

// guardState describes a node's amnesia-guard state for the key, given the
// quarantine the clients use (redlock.WithQuarantine).
func guardState(st redlock.NodeState, quarantine time.Duration) string {
	switch {
	case st.Err != nil:
		return "?"
	case st.EpochAge < 0:
		return "no epoch"
	case st.Trusted:
		return "trusted"
	case st.Void && st.EpochAge < quarantine:
		return fmt.Sprintf("void, %v left", (quarantine - st.EpochAge).Round(time.Second))
	case st.EpochAge < quarantine:
		return fmt.Sprintf("quarantined, %v left", (quarantine - st.EpochAge).Round(time.Second))
	}
	return "quarantine over, counter not vouched for"
}

const statusHelp = `Usage: redlock status [flags]

Shows the lock KEY on every node: whether the node holds it, by which owner
(the first characters of the owner value only: the whole value is a secret;
for an election's key, "{NAME}:leader", the leader's identity whole and the
first characters of the secret part: "worker-1#Ab3dE9…"), its remaining
TTL on the node, the key's fencing counter (the last fencing token handed
out), and the node's amnesia-guard state for the key ("no
epoch", "trusted", "quarantined, 40s left", computed with --quarantine, or
"void, 40s left": a failed attempt took back the grant that created the
epoch, so on the key's first use the node counts as one with no epoch). A
node that did not answer is shown as unknown ("?" in the table, null in
--json), never as free. It reads only: it never takes or waits for the lock.
The first line sums up whether one owner holds the key on a quorum of the
nodes; for a lock taken by 'redlock exec', the next line names the holder:
its host name, process id and since when it holds the lock (a record exec
keeps beside the lock for people to read, never trusted for safety).

Nodes are given as for 'redlock exec': --nodes or $REDLOCK_NODES.

--json prints one JSON object instead of the table (docs/cli.md):
  key, quorum   the key, and how many nodes make a quorum
  held          true or false: one owner holds the key on a quorum; null:
                the nodes that did not answer could change the answer
  summary       the table's first line
  owner         the owner holding the key on the most nodes, as the table
                shows it; identity: the leader's, whole, for an election
                (each absent when no node holds the key)
  holder        {"host", "pid", "since" (RFC 3339), "owner"} of a lock
                taken by 'redlock exec'; null when there is none
  nodes         one object per node, in --nodes order: "node" (addr/db),
                "state" ("held", "free" or "unknown"), "held", "owner",
                "identity", "ttl_ms" (-1: no expiry; absent when free),
                "fence", "quarantine", "error", "health" (the HEALTH
                column: "up", "down since HH:MM:SS", "quarantined until
                HH:MM:SS" or "unknown"); a node that did not answer has
                state "unknown", null held and fence, and its error

Exit status: 0 when a quorum of the nodes answered, 69 when fewer did, 64 on
bad usage (including one server named twice), 70 on an internal error.

Example:
  export REDLOCK_NODES=10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379
  redlock status --key nightly-report

Flags:
`

// runStatus implements `redlock status`: it returns the process exit status.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("redlock status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.String("nodes", "", "comma-separated node URLs or host:port (default $"+nodesEnv+")")
	key := fs.String("key", "", "the lock's key on the nodes (required)")
	timeout := durationFlagOf(fs, "timeout", time.Second, "per-node timeout")
	asJSON := fs.Bool("json", false, "print JSON instead of a table")
	quarantine := durationFlagOf(fs, "quarantine", redlock.DefaultQuarantine, "the amnesia guard's quarantine the clients use (redlock.WithQuarantine), to show how long a node stays quarantined")
	// flag prints parse errors itself; the full help goes to stdout, and
	// only on --help.
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printHelp(stdout, fs, statusHelp)
			return 0
		}
		fmt.Fprintln(stderr, "Run 'redlock status --help' for usage.")
		return exitUsage
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "redlock status: "+format+"\nRun 'redlock status --help' for usage.\n", a...)
		return exitUsage
	}
	source := "--nodes"
	if *nodes == "" {
		*nodes, source = os.Getenv(nodesEnv), "$"+nodesEnv
	}
	var urls []string
	var err error
	if strings.TrimSpace(*nodes) != "" {
		urls, err = redlock.ParseNodes(*nodes)
	}
	switch {
	case err != nil:
		return bad("%s: %v", source, err)
	case len(urls) == 0:
		return bad("no nodes: give --nodes or set $%s", nodesEnv)
	case *key == "":
		return bad("--key is required")
	case *timeout <= 0:
		return bad("--timeout must be positive")
	case *quarantine < 0:
		return bad("--quarantine %v must not be negative", *quarantine)
	case fs.NArg() > 0:
		return bad("unexpected arguments %q", fs.Args())
	}
	client, conns, code := openNodes(ctx, "status", urls, *timeout, stderr, redlock.WithNodeTimeout(*timeout))
	if client == nil {
		return code
	}
	defer client.Close()
	defer conns.close()
	if err := conns.contact.waitAll(); err != nil {
		fmt.Fprintf(stderr, "redlock status: %v\n", err)
		return exitUsage
	}

	states, err := client.Inspect(ctx, *key)
	if err != nil {
		fmt.Fprintf(stderr, "redlock status: %v\n", err)
		return exitSoftware
	}
	for i := range states {
		if states[i].Err != nil {
			// In the words exec's warnings and messages use (nodeError).
			states[i].Err = errors.New(conns.redact(nodeError(states[i].Err)))
		}
	}
	health := client.Health() // what Inspect's calls saw of each node
	sum := summarize(states, client.Quorum())
	sum.holder = pickHolder(conns.readHolders(ctx, *key), sum.recordOwner)
	if *asJSON {
		writeStatusJSON(stdout, *key, client.Quorum(), sum, states, health, *quarantine)
	} else {
		writeStatusTable(stdout, *key, client.Quorum(), sum, states, health, *quarantine)
	}
	if sum.answered < client.Quorum() {
		return exitUnavailable
	}
	return 0
}

// pickHolder returns the holder record of the owner that holds the key on
// the most nodes (owner is its shortOwner value), nil if there is none.
func pickHolder(records []*holder, owner string) *holder {
	for _, h := range records {
		if h != nil && h.Owner == owner {
			return h
		}
	}
	return nil
}

// statusSummary is what the nodes say together.
type statusSummary struct {
	answered int    // nodes read
	holders  int    // nodes holding the key for owner
	owner    string // the owner holding it on the most nodes (ownerText)
	minTTL   time.Duration
	holder   *holder // owner's holder record, if redlock exec keeps one
	// recordOwner is owner as a holder record names it (shortOwner), and
	// identity the leader's identity when owner is an election's.
	recordOwner, identity string
}

// held says whether one owner holds the key on a quorum: true, false, or
// nil when the nodes that did not answer could change the answer.
func (s statusSummary) held(n, quorum int) *bool {
	yes, no := true, false
	switch {
	case s.holders >= quorum:
		return &yes
	case s.holders+(n-s.answered) < quorum:
		return &no
	}
	return nil
}

func (s statusSummary) String(n, quorum int) string {
	var out string
	switch {
	case s.holders >= quorum:
		out = fmt.Sprintf("held by %s on %d of %d nodes (quorum %d), at least %v left", s.owner, s.holders, n, quorum, s.minTTL)
	case s.holders > 0 && s.held(n, quorum) == nil:
		return fmt.Sprintf("unknown: %s holds it on %d of %d nodes, and %d nodes did not answer: they could make up the quorum of %d", s.owner, s.holders, n, n-s.answered, quorum)
	case s.holders > 0:
		out = fmt.Sprintf("not held: %s holds it on %d of %d nodes, below the quorum of %d (left-overs of a failed attempt, or a lock that is expiring)", s.owner, s.holders, n, quorum)
	case s.answered == 0:
		return fmt.Sprintf("unknown: none of the %d nodes answered", n)
	case s.held(n, quorum) == nil:
		return fmt.Sprintf("unknown: free on the %d nodes that answered, and %d of %d nodes did not answer: they could hold it for a quorum of %d", s.answered, n-s.answered, n, quorum)
	default:
		out = fmt.Sprintf("free on all %d nodes that answered", s.answered)
	}
	if s.answered < n {
		out += fmt.Sprintf("; %d of %d nodes did not answer", n-s.answered, n)
	}
	return out
}

func summarize(states []redlock.NodeState, quorum int) statusSummary {
	var s statusSummary
	count := map[string]int{}
	ttl := map[string]time.Duration{}
	for _, st := range states {
		if st.Err != nil {
			continue
		}
		s.answered++
		if !st.Held {
			continue
		}
		count[st.Owner]++
		if old, ok := ttl[st.Owner]; !ok || st.TTL < old {
			ttl[st.Owner] = st.TTL
		}
	}
	for owner, k := range count {
		if k > s.holders || (k == s.holders && ownerText(owner) < s.owner) {
			s.holders, s.owner, s.minTTL = k, ownerText(owner), ttl[owner]
			s.recordOwner, s.identity = shortOwner(owner), ownerIdentity(owner)
		}
	}
	return s
}

// ownerIdentity returns the leader's identity in an election's owner value
// ("IDENTITY#RANDOM", RANDOM a redlock.RandomOwner value: 22 base64url
// characters; the identity may hold "#" itself), and "" for any other owner
// value.
func ownerIdentity(owner string) string {
	i := strings.LastIndex(owner, "#")
	if i <= 0 || !isRandomOwner(owner[i+1:]) {
		return ""
	}
	return owner[:i]
}

// isRandomOwner says whether s has the form of a redlock.RandomOwner value:
// 16 bytes in unpadded base64url.
func isRandomOwner(s string) bool {
	if len(s) != 22 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// ownerText is an owner value as status shows it: an election's owner with
// the leader's identity whole and the first characters of its random part
// ("worker-1#Ab3dE9…"), any other owner value as shortOwner shows it. Only
// the random part is a secret.
func ownerText(owner string) string {
	if id := ownerIdentity(owner); id != "" {
		return id + "#" + shortOwner(owner[len(id)+1:])
	}
	return shortOwner(owner)
}

// shortOwner shows the first 6 characters of an owner value: enough to tell
// holders apart, far too few to release someone else's lock.
func shortOwner(owner string) string {
	if owner == "" {
		return "-"
	}
	r := []rune(owner)
	if len(r) <= 6 {
		return "…" // a short value would be revealed whole
	}
	return string(r[:6]) + "…"
}

func fmtTTL(st redlock.NodeState) string {
	switch {
	case !st.Held:
		return "-"
	case st.TTL < 0:
		return "no expiry"
	}
	return st.TTL.Round(time.Millisecond).String()
}

func writeStatusTable(w io.Writer, key string, quorum int, sum statusSummary, states []redlock.NodeState, health []redlock.NodeHealth, quarantine time.Duration) {
	fmt.Fprintf(w, "key %q: %s\n", key, sum.String(len(states), quorum))
	if sum.holder != nil {
		fmt.Fprintf(w, "holder: %v (%v ago)\n", sum.holder, time.Since(sum.holder.Since).Round(time.Second))
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tHEALTH\tHELD\tOWNER\tTTL\tFENCE\tQUARANTINE\tERROR")
	for i, st := range states {
		h := nodeHealthText(health, i)
		if st.Err != nil {
			fmt.Fprintf(tw, "%s\t%s\t?\t-\t-\t-\t%s\t%v\n", st.Node, h, guardState(st, quarantine), st.Err)
			continue
		}
		held := "no"
		if st.Held {
			held = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t-\n", st.Node, h, held, ownerText(st.Owner), fmtTTL(st), st.Fence, guardState(st, quarantine))
	}
	_ = tw.Flush()
}

// statusJSON is the --json output, one JSON object (its shape is in
// statusHelp; docs/cli.md has an example).
type statusJSON struct {
	Key     string `json:"key"`
	Quorum  int    `json:"quorum"`
	Held    *bool  `json:"held"` // one owner holds the key on a quorum; null: unknown
	Summary string `json:"summary"`
	// Owner is the owner holding the key on the most nodes, as the table
	// shows it (ownerText); absent when no node holds it. Identity is the
	// leader's identity, whole, when the key is an election's.
	Owner    string           `json:"owner,omitempty"`
	Identity string           `json:"identity,omitempty"`
	Holder   *holder          `json:"holder"` // null: none recorded
	Nodes    []nodeStatusJSON `json:"nodes"`
}

// nodeStatusJSON is one node in --json. A node that did not answer has
// state "unknown" and null in every field it could not tell.
type nodeStatusJSON struct {
	Node       string  `json:"node"`
	State      string  `json:"state"` // "held", "free" or "unknown"
	Held       *bool   `json:"held"`
	Owner      string  `json:"owner,omitempty"`    // ownerText
	Identity   string  `json:"identity,omitempty"` // an election's leader, whole
	TTLMs      *int64  `json:"ttl_ms,omitempty"`   // absent when not held; -1: no expiry
	Fence      *uint64 `json:"fence"`
	Quarantine string  `json:"quarantine"`
	Error      string  `json:"error,omitempty"`
	Health     string  `json:"health"` // the Client's health view: up, down since ..., quarantined until ...
}

func writeStatusJSON(w io.Writer, key string, quorum int, sum statusSummary, states []redlock.NodeState, health []redlock.NodeHealth, quarantine time.Duration) {
	out := statusJSON{Key: key, Quorum: quorum, Held: sum.held(len(states), quorum), Summary: sum.String(len(states), quorum),
		Owner: sum.owner, Identity: sum.identity, Holder: sum.holder}
	for i, st := range states {
		n := nodeStatusJSON{Node: st.Node, State: "unknown", Quarantine: guardState(st, quarantine), Health: nodeHealthText(health, i)}
		if st.Err != nil {
			n.Error, n.Quarantine = st.Err.Error(), "unknown"
			out.Nodes = append(out.Nodes, n)
			continue
		}
		held, fence := st.Held, st.Fence
		n.Held, n.Fence, n.State = &held, &fence, "free"
		if st.Held {
			n.State = "held"
			n.Owner, n.Identity = ownerText(st.Owner), ownerIdentity(st.Owner)
			ms := st.TTL.Milliseconds()
			if st.TTL < 0 {
				ms = -1
			}
			n.TTLMs = &ms
		}
		out.Nodes = append(out.Nodes, n)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(out)
}

// nodeHealthText is node i's health in health (healthText), "unknown" when
// it is not there.
func nodeHealthText(health []redlock.NodeHealth, i int) string {
	if i >= len(health) {
		return redlock.HealthUnknown.String()
	}
	return healthText(health[i])
}
