package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock"
)

// nodeConns are the CLI's own connections to the nodes, next to the
// library's: to check at first contact that no two URLs name the same server,
// and to keep the holder record (see holder).
type nodeConns struct {
	names     []string // as the library names the nodes: "addr/db"
	clients   []*redis.Client
	passwords []string // to keep them out of every message
	timeout   time.Duration
	// contact is the first contact with every node (startContact), nil
	// before it started.
	contact *firstContact
	// health is the library Client's health view (nil: none), for what a
	// node that did not answer a vote in time said last.
	health func() []redlock.NodeHealth
}

// dialNodes connects to the nodes of urls (already accepted by redlock.Dial)
// with the library's node settings, and timeout per request.
func dialNodes(urls []string, timeout time.Duration) (*nodeConns, error) {
	n := &nodeConns{timeout: timeout}
	for i, u := range urls {
		o, err := redis.ParseURL(u)
		if err != nil {
			n.close()
			return nil, fmt.Errorf("node %d: %w", i+1, err)
		}
		n.names = append(n.names, fmt.Sprintf("%s/%d", o.Addr, o.DB))
		n.passwords = append(n.passwords, o.Password)
		n.clients = append(n.clients, redlock.NewNodeClient(o.Addr, func(c *redis.Options) {
			c.Username, c.Password, c.DB, c.TLSConfig = o.Username, o.Password, o.DB, o.TLSConfig
		}))
	}
	return n, nil
}

// close closes the connections, once the first contact has ended (within
// one per-node timeout of its start).
func (n *nodeConns) close() {
	if n.contact != nil {
		n.contact.waitAll()
	}
	for _, c := range n.clients {
		_ = c.Close()
	}
}

// each runs fn on every node at once, each call within the per-node
// timeout, and returns fn's errors in node order.
func (n *nodeConns) each(ctx context.Context, fn func(ctx context.Context, i int, c *redis.Client) error) []error {
	errs := make([]error, len(n.clients))
	var wg sync.WaitGroup
	for i, c := range n.clients {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, n.timeout)
			defer cancel()
			errs[i] = fn(ctx, i, c)
		})
	}
	wg.Wait()
	return errs
}

// errSameServer reports two node URLs that name one Redis server.
var errSameServer = errors.New("the same Redis server")

// sameAddress returns an error wrapping errSameServer if two nodes name one
// address, with another database number or with "localhost" for
// 127.0.0.1: one server, found without asking it. Other spellings of one
// server (two names of one host) are found by their run_id (firstContact).
func (n *nodeConns) sameAddress() error {
	seen := map[string]int{}
	for i, name := range n.names {
		addr, _, _ := strings.Cut(name, "/")
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			continue
		}
		if host = strings.ToLower(host); host == "localhost" {
			host = "127.0.0.1"
		}
		key := net.JoinHostPort(host, port)
		if j, dup := seen[key]; dup {
			return fmt.Errorf("node %d (%s) and node %d (%s) are %w (the same address); a quorum needs independent servers",
				j+1, n.names[j], i+1, n.names[i], errSameServer)
		}
		seen[key] = i
	}
	return nil
}

// firstContact asks every node for its run_id (INFO server) at once, each
// within the per-node timeout, so that one server named twice (say as
// 127.0.0.1:6379 and localhost:6379, or with two database numbers), which
// would hold two votes of the quorum, is found. It runs beside the lock's
// first attempt: a node that does not answer (a paused or slow one) delays
// nothing once the nodes the lock needs have answered (wait).
type firstContact struct {
	names []string
	done  []chan struct{} // closed once node i answered or failed
	ids   []string        // run_id, written before done[i] is closed
	errs  []error         // the error, written before done[i] is closed
}

// startContact starts the first contact with every node; ctx bounds it
// beside the per-node timeout.
func (n *nodeConns) startContact(ctx context.Context) *firstContact {
	fc := &firstContact{names: n.names, done: make([]chan struct{}, len(n.clients)),
		ids: make([]string, len(n.clients)), errs: make([]error, len(n.clients))}
	for i, c := range n.clients {
		fc.done[i] = make(chan struct{})
		go func() {
			defer close(fc.done[i])
			ctx, cancel := context.WithTimeout(ctx, n.timeout)
			defer cancel()
			info, err := c.Info(ctx, "server").Result()
			if err != nil {
				fc.errs[i] = err
				return
			}
			fc.ids[i] = infoField(info, "run_id")
		}()
	}
	n.contact = fc
	return fc
}

// wait waits until each node of which[i] true has answered or failed (at
// most one per-node timeout from the start), and returns an error wrapping
// errSameServer if two nodes that answered, so far, have the same run_id.
// A node that has not answered yet is not waited for, unless in which.
func (fc *firstContact) wait(which []bool) error {
	for i, w := range which {
		if w && i < len(fc.done) {
			<-fc.done[i]
		}
	}
	return fc.distinct()
}

// waitAll waits for every node's answer or failure, and checks as wait.
func (fc *firstContact) waitAll() error {
	all := make([]bool, len(fc.done))
	for i := range all {
		all[i] = true
	}
	return fc.wait(all)
}

// answered reports whether node i has answered or failed, and its error.
func (fc *firstContact) answered(i int) (bool, error) {
	if fc == nil || i >= len(fc.done) {
		return false, nil
	}
	select {
	case <-fc.done[i]:
		return true, fc.errs[i]
	default:
		return false, nil
	}
}

// distinct checks the run_ids of the nodes that have answered so far.
func (fc *firstContact) distinct() error {
	seen := map[string]int{}
	for i := range fc.done {
		ok, err := fc.answered(i)
		if !ok || err != nil || fc.ids[i] == "" {
			continue
		}
		id := fc.ids[i]
		if j, dup := seen[id]; dup {
			return fmt.Errorf("node %d (%s) and node %d (%s) are %w (run_id %s); a quorum needs independent servers",
				j+1, fc.names[j], i+1, fc.names[i], errSameServer, id)
		}
		seen[id] = i
	}
	return nil
}

// granted says, by node, which nodes granted the acquisition whose outcomes
// are nodes: the votes the lock counts, whose servers must be distinct.
func (n *nodeConns) granted(nodes []redlock.NodeResult) []bool {
	out := make([]bool, len(n.names))
	for i, r := range nodes {
		// The library reports the nodes in the order they were given.
		if i < len(out) && r.Node == n.names[i] && r.Outcome == redlock.OutcomeGranted {
			out[i] = true
		}
	}
	return out
}

// infoField returns field's value in an INFO reply, "" if absent.
func infoField(info, field string) string {
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), field+":"); ok {
			return v
		}
	}
	return ""
}

// redact removes the nodes' passwords from msg. go-redis does not put them
// in its errors; this keeps it so.
func (n *nodeConns) redact(msg string) string {
	for _, pw := range n.passwords {
		if len(pw) >= 3 {
			msg = strings.ReplaceAll(msg, pw, "REDACTED")
		}
	}
	return msg
}

// describeNodes writes what each node answered, one line per node: the
// outcome, and the node's own words for a failure (WRONGPASS, NOAUTH,
// connection refused, a timeout). later holds, by node, what a node that
// had not answered in time answered when asked again ("" if not asked).
func (n *nodeConns) describeNodes(w io.Writer, nodes []redlock.NodeResult, later []string) {
	for i, r := range nodes {
		line := fmt.Sprintf("  %s: %s", r.Node, r.Outcome)
		if r.Outcome == redlock.OutcomePending {
			line += ": no answer yet when the others had decided the vote"
			asked := i < len(later) && later[i] != ""
			if down := n.lastDown(i, r.Node); down != "" && !asked { // else its fresher answer follows
				line += "; " + down
			}
		}
		if r.Err != nil {
			line += ": " + n.redact(nodeError(r.Err))
		}
		if i < len(later) && later[i] != "" {
			line += "; asked again: " + later[i]
		}
		fmt.Fprintln(w, line)
	}
}

// failures describes, one line each, the nodes that failed in an
// acquisition whose outcomes are nodes: those that answered with an error
// (WRONGPASS, NOAUTH, ...), could not be reached, or did not answer within
// the per-node timeout, in describeNodes' words ("NODE: OUTCOME: ERROR"),
// as `redlock status` shows them. A node the vote was decided without
// (pending) is described by its answer at first contact, when that was a
// failure: its answer to the acquisition is not awaited (the job would
// wait for it), and a node that answered at first contact is not reported.
// later lists the pending nodes whose first contact has not ended yet:
// lateFailures describes them once it has.
func (n *nodeConns) failures(nodes []redlock.NodeResult) (out []string, later []int) {
	for i, r := range nodes {
		switch r.Outcome {
		case redlock.OutcomeError, redlock.OutcomeUnreachable, redlock.OutcomeTimedOut:
			out = append(out, fmt.Sprintf("node %s: %s: %s", r.Node, r.Outcome, n.redact(nodeError(r.Err))))
		case redlock.OutcomePending:
			// The library reports the nodes in the order they were given.
			if i >= len(n.names) || r.Node != n.names[i] {
				continue
			}
			switch ended, err := n.contact.answered(i); {
			case !ended && n.contact != nil:
				later = append(later, i)
			case err != nil:
				out = append(out, n.contactFailure(i, err))
			}
		}
	}
	return out, later
}

// lateFailures waits for the first contact with the nodes of later (see
// failures) and describes those that failed, one line each.
func (n *nodeConns) lateFailures(later []int) []string {
	var out []string
	for _, i := range later {
		<-n.contact.done[i]
		if _, err := n.contact.answered(i); err != nil {
			out = append(out, n.contactFailure(i, err))
		}
	}
	return out
}

func (n *nodeConns) contactFailure(i int, err error) string {
	return fmt.Sprintf("node %s: %s: %s (at first contact; the lock's vote did not wait for it)", n.names[i], contactOutcome(err), n.redact(nodeError(err)))
}

// contactOutcome classifies an error of the first contact with a node as
// the library classifies a node's answer (redlock.Outcome).
func contactOutcome(err error) redlock.Outcome {
	var reply redis.Error
	var ne net.Error
	switch {
	case errors.As(err, &reply):
		return redlock.OutcomeError
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return redlock.OutcomeTimedOut
	}
	return redlock.OutcomeUnreachable
}

// nodeError is a node's error as a person reads it. Redis 7 refuses a long
// command from a client that has not authenticated with a protocol error
// ("unauthenticated multibulk length") before it could say NOAUTH: the
// acquire script's arguments are such a command.
func nodeError(err error) string {
	msg := err.Error()
	if strings.Contains(msg, "unauthenticated multibulk") {
		return "NOAUTH the node needs a password (it answered: " + msg + ")"
	}
	return msg
}

// askPending asks each node that had not answered when the vote was
// decided (OutcomePending) for a PING, within the per-node timeout, and
// returns by node what it answers: "PONG", or its error (WRONGPASS, NOAUTH,
// a timeout). A failed acquisition then says what every node answers.
func (n *nodeConns) askPending(ctx context.Context, nodes []redlock.NodeResult) []string {
	out := make([]string, len(n.clients))
	pending := make([]bool, len(n.clients))
	ask := false
	for i, r := range nodes {
		// The library reports the nodes in the order they were given.
		if i < len(n.names) && r.Node == n.names[i] && r.Outcome == redlock.OutcomePending {
			pending[i], ask = true, true
		}
	}
	if !ask {
		return nil
	}
	n.each(ctx, func(ctx context.Context, i int, c *redis.Client) error {
		if !pending[i] {
			return nil
		}
		if err := c.Ping(ctx).Err(); err != nil {
			out[i] = n.redact(err.Error())
		} else {
			out[i] = "PONG"
		}
		return nil
	})
	return out
}

// holder is the record of who holds a lock taken by redlock exec, kept
// beside the lock key on every node with the lock's TTL, refreshed with its
// extensions and deleted on release. It is for people reading
// `redlock status`; nothing relies on it for safety.
type holder struct {
	Host  string    `json:"host"`
	PID   int       `json:"pid"`
	Since time.Time `json:"since"` // when the lock was taken (wall clock)
	Owner string    `json:"owner"` // shortOwner of the lock's owner value
}

// holderKey names key's holder record: "{key}:holder", or "key:holder" when
// key has a Redis Cluster hash tag already, so that it shares the lock key's
// slot (redlock.SiblingKey).
func holderKey(key string) string { return redlock.SiblingKey(key, ":holder") }

func newHolder(l *redlock.Lock) holder {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	return holder{Host: host, PID: os.Getpid(), Since: l.AcquiredAt().UTC().Truncate(time.Millisecond), Owner: shortOwner(l.Owner())}
}

func (h holder) String() string {
	return fmt.Sprintf("host %s, pid %d, since %s", h.Host, h.PID, h.Since.Format(time.RFC3339))
}

// The holder record's scripts change it only while it is still ours.
var (
	holderRefresh = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`)
	holderDelete  = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
)

// writeHolder stores h beside key on every node for ttl.
func (n *nodeConns) writeHolder(ctx context.Context, key string, h holder, ttl time.Duration) {
	v, _ := json.Marshal(h)
	n.each(ctx, func(ctx context.Context, _ int, c *redis.Client) error {
		return c.Set(ctx, holderKey(key), v, ttl).Err()
	})
}

// refreshHolder resets h's TTL on the nodes where it is still stored.
func (n *nodeConns) refreshHolder(ctx context.Context, key string, h holder, ttl time.Duration) {
	v, _ := json.Marshal(h)
	n.each(ctx, func(ctx context.Context, _ int, c *redis.Client) error {
		return holderRefresh.Run(ctx, c, []string{holderKey(key)}, v, ttl.Milliseconds()).Err()
	})
}

// deleteHolder deletes h where it is still stored.
func (n *nodeConns) deleteHolder(ctx context.Context, key string, h holder) {
	v, _ := json.Marshal(h)
	n.each(ctx, func(ctx context.Context, _ int, c *redis.Client) error {
		return holderDelete.Run(ctx, c, []string{holderKey(key)}, v).Err()
	})
}

// readHolders reads key's holder record on every node; nil where there is
// none or it could not be read.
func (n *nodeConns) readHolders(ctx context.Context, key string) []*holder {
	out := make([]*holder, len(n.clients))
	n.each(ctx, func(ctx context.Context, i int, c *redis.Client) error {
		v, err := c.Get(ctx, holderKey(key)).Bytes()
		if err != nil {
			return err
		}
		var h holder
		if json.Unmarshal(v, &h) == nil {
			out[i] = &h
		}
		return nil
	})
	return out
}

// lastDown says, for node i (named node), "down since 15:04:05: ERROR" when
// the Client's health view has it down, "" otherwise.
func (n *nodeConns) lastDown(i int, node string) string {
	if n.health == nil {
		return ""
	}
	h := n.health()
	if i >= len(h) || h[i].Node != node || h[i].State != redlock.HealthDown || h[i].LastError == nil {
		return ""
	}
	return healthText(h[i]) + ": " + n.redact(nodeError(h[i].LastError))
}
