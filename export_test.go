package redlock

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/mutation"
)

// The script mutants' rewrites (mutation.Compile) read the library's
// script sources, which only a build with the redlock_mutants tag
// registers (mutants_on.go, with the knobs). A rewrite runs on the wire
// and needs no knob, so the tests register the sources in every build:
// without them a test of a script mutant fails in an ordinary go test run.
func init() {
	for _, s := range scripts {
		mutation.Scripts[s.name] = s.src
	}
}

// ScriptHashes names each Lua script's SHA1, so that tests outside the
// package can delay or fail one script on a node.
var ScriptHashes = func() map[string]string {
	m := make(map[string]string, len(scripts))
	for _, s := range scripts {
		m[s.name] = s.Hash()
	}
	return m
}()

// LoadScripts loads every Lua script into a node's script cache, so that
// later calls are one EVALSHA each (no NOSCRIPT round trip).
func LoadScripts(ctx context.Context, rc redis.Scripter) error {
	for _, s := range scripts {
		if err := s.Load(ctx, rc).Err(); err != nil {
			return err
		}
	}
	return nil
}

// WaitPattern is the PUBSUB CHANNELS pattern that matches the channels of
// lock key name's waiters (name must hold no glob character).
func WaitPattern(name string) string {
	return waitChannelPrefix + strings.Repeat("?", ticketLen) + ":" + channelKey(name)
}

// WaitChannel and WaitingChannel name a waiter's channel and the presence
// channel of lock key name, as a waiting Client subscribes them.
func WaitChannel(ticket, name string) string { return waitChannel(ticket, name) }

// WaitingChannel: see WaitChannel.
func WaitingChannel(name string) string { return waitingChannel(name) }

// NotifyState returns how many waiters of c want to be told of a release,
// and how many channels its pub/sub connections are subscribed to, summed
// over nodes (call it once the node goroutines are idle).
func NotifyState(c *Client) (waiters, subscribed int) {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	for _, ns := range c.notify.subs {
		if ns != nil {
			subscribed += len(ns.have)
		}
	}
	return len(c.notify.waiters), subscribed
}

// DialWith is Dial with adjust applied to node i's go-redis options before
// its client is made: tests give the nodes an in-memory dialer and a small
// connection pool.
func DialWith(urls []string, adjust func(i int, o *redis.Options), opts ...Option) (*Client, error) {
	return dial(urls, adjust, opts)
}

// ValidityLeft is the validity an acquisition leaves (validityLeft).
var ValidityLeft = validityLeft

// VouchDelay is how long after a successful acquisition the vouching of
// untrusted grants that need no token written back waits (finishGrants).
const VouchDelay = vouchDelay

// CloseGrace is how long Close gives the calls it stopped at its bound to
// end.
const CloseGrace = closeGrace

// NodeIncarnation is one node's incarnation as a Client knows it.
type NodeIncarnation = nodeIncarnation

// Incarnations returns every node's incarnation as c knows it.
func Incarnations(c *Client) []NodeIncarnation { return c.incarnations() }

// The incarnation statuses, by name.
var (
	IncUnknown     = incUnknown
	IncVerified    = incVerified
	IncQuarantined = incQuarantined
)

// ReplyRule is one row of the table of node replies (replyRules), for the
// tests that make a real redis-server send each reply of the table.
type ReplyRule struct {
	Prefix  string
	Kind    string // "unfixable" or "transient"
	Fix     string
	KeyOnly bool
}

func exportRule(r *replyRule) ReplyRule {
	kind := "unknown"
	switch r.kind {
	case replyUnfixable:
		kind = "unfixable"
	case replyTransient:
		kind = "transient"
	}
	return ReplyRule{Prefix: r.prefix, Kind: kind, Fix: r.fix, KeyOnly: r.keyOnly}
}

// ReplyRules returns every row of the table, in order.
func ReplyRules() []ReplyRule {
	out := make([]ReplyRule, len(replyRules))
	for i := range replyRules {
		out[i] = exportRule(&replyRules[i])
	}
	return out
}

// ReplyRuleOf returns the row that err, a node's error reply, matches
// (replyRuleOf), and false when none does.
func ReplyRuleOf(err error) (ReplyRule, bool) {
	r := replyRuleOf(err)
	if r == nil {
		return ReplyRule{}, false
	}
	return exportRule(r), true
}
