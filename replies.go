package redlock

// What a node's error replies mean: the one table the package classifies
// them by, for every operation (acquire, extend, release, semaphore,
// multi-key lock, election).

import (
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// ErrMisconfigured means that so many nodes answered with an error reply
// that no retry can fix, until someone changes the node or the Client's
// configuration, that fewer than a majority of the nodes are left: a
// missing or wrong password, an ACL user without the permission the
// scripts need, a replica or a Redis Cluster node where an independent
// master is expected, scripting renamed or disabled, a key of another type
// under the name of a lock's counter or epoch. The call fails at once
// (Acquire does not retry), and the error says which node and what to fix.
// It is matched with errors.Is, and is found in the Cause of the call's
// *QuorumError (errors.As), beside ErrNotAcquired, ErrNotHeld or
// ErrNoQuorum; errors.As with go-redis's redis.Error finds the node's own
// reply.
var ErrMisconfigured = errors.New("redlock: node misconfigured")

// replyKind is what a node's error reply means.
type replyKind int

const (
	// replyUnknown: not in the table (a script error, say); retried, and
	// the node counts as down while it answers so.
	replyUnknown replyKind = iota
	// replyTransient: the node cannot serve now but will by itself
	// (loading its data, a script running too long, a failover); retried.
	replyTransient
	// replyUnfixable: the same command on the same node gets the same
	// reply until someone changes the node's or the Client's configuration
	// (or data): not retried.
	replyUnfixable
)

// replyRule is one row of the table: the replies that start with prefix,
// what they mean and, for the unfixable ones, what to fix (after "node X").
type replyRule struct {
	prefix string
	kind   replyKind
	fix    string
	// keyOnly: the reply is about one key's data, not the node, which
	// still answers (it stays up in the Client's health view).
	keyOnly bool
}

// replyRules is the table of the error replies the package knows.
//
// READONLY fails at once: a node the Client talks to directly (Dial, or a
// *redis.Client given to New) that answers it is a replica, and stays one
// until someone reconfigures it. A master demoted by a Sentinel failover
// answers it too, for as long as its client has not switched to the new
// master: a Sentinel failover client (redis.NewFailoverClient) given to New
// switches by itself, so on such a node READONLY is retried instead
// (unfixableOn).
var replyRules = []replyRule{
	{prefix: "NOAUTH ", kind: replyUnfixable, fix: "requires a password: set it in the URL (redis://:PASSWORD@host) or Options.Password"},
	// Redis 7.0 with requirepass answers a command of more than 10
	// arguments (a lock script's EVALSHA) sent without a password so,
	// instead of NOAUTH, and closes the connection.
	{prefix: "ERR Protocol error: unauthenticated", kind: replyUnfixable, fix: "requires a password: set it in the URL (redis://:PASSWORD@host) or Options.Password"},
	{prefix: "WRONGPASS ", kind: replyUnfixable, fix: "refused the username or password: check the credentials in the URL (redis://USER:PASSWORD@host) or Options.Username and Options.Password"},
	{prefix: "NOPERM ", kind: replyUnfixable, fix: aclFix},
	// Redis 7.0 answers so, instead of NOPERM, when the ACL denies a
	// command, key or channel that a script calls (SET, say): "ERR The user
	// executing the script can't run this command or subcommand script:
	// ...".
	{prefix: "ERR The user executing the script ", kind: replyUnfixable, fix: aclFix},
	{prefix: "READONLY ", kind: replyUnfixable, fix: "is a read-only replica: give the Client the master's address (each node must be an independent master)"},
	{prefix: "MOVED ", kind: replyUnfixable, fix: "is a Redis Cluster node: each node must be an independent master, not a member of a cluster"},
	{prefix: "ASK ", kind: replyUnfixable, fix: "is a Redis Cluster node: each node must be an independent master, not a member of a cluster"},
	{prefix: "CROSSSLOT ", kind: replyUnfixable, fix: "is a Redis Cluster node: each node must be an independent master, not a member of a cluster"},
	{prefix: "ERR unknown command", kind: replyUnfixable, fix: "does not know a command the lock needs (EVALSHA, EVAL: renamed with rename-command, or disabled): restore it"},
	// A URL's database number (redis://host:port/DB) at or above the
	// node's "databases" setting: SELECT fails on every connection.
	{prefix: "ERR DB index is out of range", kind: replyUnfixable, fix: "has fewer databases than the URL's database number (redis://host:port/DB): use a number below the node's 'databases' setting (16 by default)"},
	{prefix: "NOSCRIPT ", kind: replyUnfixable, fix: "keeps no scripts (loading the lock's script failed): check that EVAL and SCRIPT are allowed"},
	{prefix: "WRONGTYPE ", kind: replyUnfixable, keyOnly: true, fix: "holds a key of another type under the name of a lock's fencing counter or epoch: delete it, or use another key or WithKeyPrefix"},

	{prefix: "LOADING ", kind: replyTransient},
	{prefix: "BUSY ", kind: replyTransient},
	{prefix: "MASTERDOWN ", kind: replyTransient},
	{prefix: "TRYAGAIN ", kind: replyTransient},
	{prefix: "CLUSTERDOWN ", kind: replyTransient},
	{prefix: "OOM ", kind: replyTransient},
	{prefix: "MISCONF ", kind: replyTransient},
	{prefix: "NOREPLICAS ", kind: replyTransient},
}

// aclFix is what to fix on a node whose ACL denies the lock something: the
// scripts run their commands as the Client's user, so it needs them too.
const aclFix = "denies the ACL user a command or key the lock needs: allow the scripts, the commands they run, PUBLISH/SUBSCRIBE and INFO on the lock's keys and channels (ACL SETUSER ... +@scripting +@read +@write +time +@pubsub +info)"

// replyRuleOf returns the row of replyRules that err, an error reply of a
// node, matches, and nil when err is no error reply or none matches.
func replyRuleOf(err error) *replyRule {
	var reply redis.Error
	if err == nil || !errors.As(err, &reply) {
		return nil
	}
	msg := reply.Error()
	for i := range replyRules {
		if strings.HasPrefix(msg, replyRules[i].prefix) {
			return &replyRules[i]
		}
	}
	return nil
}

// unfixableOn reports whether err, node n's answer, is an error reply no
// retry can fix on that node (see replyRules), and returns its row.
func unfixableOn(n *node, err error) *replyRule {
	r := replyRuleOf(err)
	if r == nil || r.kind != replyUnfixable {
		return nil
	}
	if r.prefix == "READONLY " && failoverClient(n) {
		return nil // it switches to the new master by itself
	}
	return r
}

// failoverClient reports whether n's client is a Sentinel failover client
// (go-redis names its address "FailoverClient").
func failoverClient(n *node) bool {
	rc, ok := n.Client.(*redis.Client)
	return ok && rc.Options().Addr == "FailoverClient"
}

// misconfigError is one node's unfixable reply, with what to fix.
type misconfigError struct {
	node  string
	fix   string
	reply error
}

func (e *misconfigError) Error() string {
	return fmt.Sprintf("node %s %s (it answered: %v)", e.node, e.fix, e.reply)
}

// Unwrap returns ErrMisconfigured and the node's reply.
func (e *misconfigError) Unwrap() []error { return []error{ErrMisconfigured, e.reply} }

// misconfigured returns why no call like the failed one qe describes can
// succeed while the nodes stay as they are: so many nodes answered with an
// error reply that no retry fixes (unfixableOn) that the rest are fewer than
// a quorum. It is nil when a retry may succeed (a node that timed out, was
// unreachable or answered something else may still grant). The error wraps
// ErrMisconfigured and names the first such node and what to fix.
func (c *Client) misconfigured(qe *QuorumError) error {
	var first *misconfigError
	refusing := 0
	for i, r := range qe.Nodes {
		if r.Outcome != OutcomeError || i >= len(c.nodes) {
			continue
		}
		if rule := unfixableOn(c.nodes[i], r.Err); rule != nil {
			refusing++
			if first == nil {
				first = &misconfigError{node: r.Node, fix: rule.fix, reply: r.Err}
			}
		}
	}
	if refusing == 0 || len(qe.Nodes)-refusing >= qe.Quorum {
		return nil
	}
	return fmt.Errorf("%s answer with an error that retrying cannot fix (not retried): %w", nodesOf(refusing, len(qe.Nodes)), first)
}

// withMisconfig adds to qe's Cause why the nodes cannot apply the
// operation (misconfigured), when that is so, and returns qe.
func (c *Client) withMisconfig(qe *QuorumError) *QuorumError {
	if cause := c.misconfigured(qe); cause != nil {
		qe.Cause = joinCause(qe.Cause, cause)
	}
	return qe
}

// nodeOf names node i (from 0) of n as people count them: "node 1 of 3".
func nodeOf(i, n int) string { return fmt.Sprintf("node %d of %d", i+1, n) }

// nodesOf says "k of n nodes".
func nodesOf(k, n int) string { return fmt.Sprintf("%d of %d nodes", k, n) }
