package redlock

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// ScriptHashes names each Lua script's SHA1, so that tests outside the
// package can delay or fail one script on a node.
var ScriptHashes = map[string]string{
	"acquire":      acquireScript.Hash(),
	"fence":        fenceScript.Hash(),
	"extend":       extendScript.Hash(),
	"reput":        reputScript.Hash(),
	"release":      releaseScript.Hash(),
	"abandon":      abandonScript.Hash(),
	"releaseVouch": releaseVouchScript.Hash(),
}

// LoadScripts loads every Lua script into a node's script cache, so that
// later calls are one EVALSHA each (no NOSCRIPT round trip).
func LoadScripts(ctx context.Context, rc redis.Scripter) error {
	for _, s := range []*redis.Script{acquireScript, fenceScript, extendScript, reputScript, releaseScript, abandonScript, releaseVouchScript, inspectScript} {
		if err := s.Load(ctx, rc).Err(); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseChannel is releaseChannel: the channel the release scripts publish
// on for lock key name (prefix included).
var ReleaseChannel = releaseChannel

// SubscriptionLinger is how long a key stays subscribed after its last
// waiter left (notify.go).
const SubscriptionLinger = subscriptionLinger

// NotifyState returns how many keys c's waiters wait for, and how many
// channels its pub/sub connections are subscribed to, summed over nodes
// (read without the node goroutines' lock: call it once they are idle).
func NotifyState(c *Client) (keys, subscribed int) {
	c.notify.mu.Lock()
	defer c.notify.mu.Unlock()
	for _, ns := range c.notify.subs {
		if ns != nil {
			subscribed += len(ns.have)
		}
	}
	return len(c.notify.keys), subscribed
}

// DialWith is Dial with adjust applied to node i's go-redis options before
// its client is made: tests give the nodes an in-memory dialer and a small
// connection pool.
func DialWith(urls []string, adjust func(i int, o *redis.Options), opts ...Option) (*Client, error) {
	return dial(urls, adjust, opts)
}
