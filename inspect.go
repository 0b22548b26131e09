package redlock

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// inspectTimeout is Inspect's per-node timeout when WithNodeTimeout is not
// set: there is no TTL to derive it from.
const inspectTimeout = time.Second

// NodeState is what one node holds for a lock key, as read by Inspect.
type NodeState struct {
	// Node names the node: its address (never its password) or the name the
	// client was given.
	Node string
	// Held reports whether the lock key exists on the node.
	Held bool
	// Owner is the owner value stored in the key, "" when not held. Treat it
	// as a secret (whoever knows it can release the lock): show a prefix at
	// most.
	Owner string
	// TTL is the key's remaining time to live on the node's clock (PTTL): 0
	// when not held, negative when the key has no expiry (it was not set by
	// this package).
	TTL time.Duration
	// Fence is the node's fencing counter for the key (incremented by each
	// grant there, raised by write-backs), 0 when none.
	Fence uint64
	// EpochAge is the age, on the node's clock, of the key's epoch there
	// (amnesia guard, see WithQuarantine); -1 when the node has none: the
	// key was never used on it with the guard on, or the node lost its data.
	EpochAge time.Duration
	// Trusted reports whether a successful acquisition vouched for the
	// node's epoch: its votes count.
	Trusted bool
	// Void reports that the failed attempt whose grant created the node's
	// epoch took that grant back: on a key's first use the node counts as
	// one without an epoch, otherwise its votes wait for vouching or for
	// the end of its quarantine like any untrusted epoch (its age keeps
	// counting). See WithQuarantine.
	Void bool
	// Err is why the node could not be read (unreachable, timed out, an
	// error reply); the other fields are then zero.
	Err error
}

// Inspect reads the state of the lock on key on every node at once, each
// within the per-node timeout (WithNodeTimeout, default 1 s), and returns one
// NodeState per node in node order. It is read-only: it neither takes nor
// waits for the lock, and what it reports may change right after. A node that
// cannot be read has Err set; Inspect itself returns ErrInvalidArgument for an
// empty key or one Acquire refuses (longer than MaxKeyLen, a brace but no
// hash tag) and ErrClosed on a closed Client.
func (c *Client) Inspect(ctx context.Context, key string) ([]NodeState, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	name, err := checkKey(key, c.cfg.prefix)
	if err != nil {
		return nil, err
	}
	if c.eng.Closed() {
		return nil, ErrClosed
	}
	keys := []string{name, fenceKey(name), epochKey(name)}
	timeout := c.cfg.nodeTimeout
	if timeout <= 0 {
		timeout = inspectTimeout
	}
	states := make([]NodeState, len(c.nodes))
	var wg sync.WaitGroup
	c.eng.NoteTimeout(timeout)
	defer c.eng.Track()()
	for i, n := range c.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			states[i] = inspectNode(nctx, n, keys)
			c.health.record(ctx, i, states[i].Err)
		})
	}
	wg.Wait()
	return states, nil
}

func inspectNode(ctx context.Context, n *node, keys []string) NodeState {
	st := NodeState{Node: n.Name}
	res, err := inspectScript.Run(ctx, n.Client, keys).Slice()
	if err == nil && len(res) != 6 {
		err = fmt.Errorf("redlock: unexpected inspect reply %v", res)
	}
	if err != nil {
		st.Err = err
		return st
	}
	owner, _ := res[0].(string)
	pttl, _ := res[1].(int64)
	fence, _ := res[2].(string)
	age, _ := res[3].(int64)
	trusted, _ := res[4].(int64)
	void, _ := res[5].(int64)
	st.EpochAge, st.Trusted, st.Void = -1, trusted == 1, void == 1
	if age >= 0 {
		st.EpochAge = time.Duration(age) * time.Millisecond
	}
	if fence != "" {
		f, err := strconv.ParseUint(fence, 10, 64)
		if err != nil {
			st.Err = fmt.Errorf("redlock: fencing counter %q is not a number", fence)
			return st
		}
		st.Fence = f
	}
	if owner != "" {
		st.Held, st.Owner = true, owner
		if pttl >= 0 {
			st.TTL = time.Duration(pttl) * time.Millisecond
		} else {
			st.TTL = -1
		}
	}
	return st
}
