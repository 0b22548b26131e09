package nodecall

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ScriptCall is one script call whose command is built once and sent to
// every node of a vote: EVALSHA, the script's hash, the keys and the
// arguments, boxed once instead of once per node. Each node gets its own copy
// of the argument slice: a go-redis hook may rewrite a command's arguments
// in place.
type ScriptCall struct {
	script *Script
	keys   []string
	args   []any
	cmd    []any // "evalsha", hash, len(keys), keys..., args...; never handed out
	// copies, once ForNodes made it, holds every node's copy of cmd in one
	// allocation: node i's is the i-th run of len(cmd) elements.
	copies []any
}

func NewScriptCall(s *Script, keys []string, args ...any) *ScriptCall {
	return NewScriptCallBoxed(s, keys, nil, args...)
}

// NewScriptCallBoxed is NewScriptCall with the keys already boxed (keyArgs,
// as BoxedKeys returned them for the same keys), or nil to box them: boxing
// a string allocates, and a release reuses what its acquisition boxed.
// args are copied, not kept: the compiler can then keep a caller's argument
// list on its stack.
func NewScriptCallBoxed(s *Script, keys []string, keyArgs []any, args ...any) *ScriptCall {
	cmd := make([]any, 0, 3+len(keys)+len(args))
	cmd = append(cmd, "evalsha", s.hash, len(keys))
	if keyArgs != nil {
		cmd = append(cmd, keyArgs...)
	} else {
		for _, k := range keys {
			cmd = append(cmd, k)
		}
	}
	cmd = append(cmd, args...)
	return &ScriptCall{script: s, keys: keys, args: cmd[3+len(keys):], cmd: cmd}
}

// Keys returns the call's keys (not a copy: do not modify them).
func (sc *ScriptCall) Keys() []string { return sc.keys }

// BoxedKeys returns the call's keys as boxed in its command, for another
// call on the same keys (NewScriptCallBoxed); n of them, from the first.
func (sc *ScriptCall) BoxedKeys(n int) []any { return sc.cmd[3 : 3+n : 3+n] }

// BoxedArg returns the call's i-th argument (ARGV[i+1]) as boxed in its
// command.
func (sc *ScriptCall) BoxedArg(i int) any { return sc.args[i] }

// ForNodes makes room for the copies of the command that n nodes get, in one
// allocation instead of one per node, and returns sc. A call made so must
// be run at most once per node (one vote).
func (sc *ScriptCall) ForNodes(n int) *ScriptCall {
	sc.copies = make([]any, n*len(sc.cmd))
	return sc
}

// argsFor returns node i's own copy of the command.
func (sc *ScriptCall) argsFor(i int) []any {
	m := len(sc.cmd)
	if (i+1)*m > len(sc.copies) {
		return slices.Clone(sc.cmd)
	}
	args := sc.copies[i*m : (i+1)*m : (i+1)*m]
	copy(args, sc.cmd)
	return args
}

// millisArg is a duration in milliseconds as the scripts take it, a decimal
// string, boxed (see MillisArgs).
type millisArg struct {
	d time.Duration
	v any
}

// MillisArgs remembers the last duration it boxed as a script argument:
// a Client's calls mostly use one TTL and one retention, and formatting and
// boxing them per attempt cost four allocations.
type MillisArgs struct{ last atomic.Pointer[millisArg] }

// Arg returns d in milliseconds, a decimal string, boxed.
func (m *MillisArgs) Arg(d time.Duration) any {
	if p := m.last.Load(); p != nil && p.d == d {
		return p.v
	}
	p := &millisArg{d: d, v: strconv.FormatInt(d.Milliseconds(), 10)}
	m.last.Store(p)
	return p.v
}

// Script is a Lua script with its hash boxed once: boxing a string
// allocates, and every ScriptCall holds the hash.
type Script struct {
	*redis.Script
	hash any
}

// NewScript returns the script of the Lua source src.
func NewScript(src string) *Script {
	s := redis.NewScript(src)
	return &Script{Script: s, hash: s.Hash()}
}

// processor is the part of a go-redis client that runs a prebuilt command.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// Run sends the call to one node: EVALSHA with the prebuilt command, then
// EVAL with the script's source when the node answers NOSCRIPT (as
// redis.Script.Run does). A node client that cannot run a prebuilt command
// gets Script.Run.
func (sc *ScriptCall) Run(ctx context.Context, n *Node) *redis.Cmd {
	p, ok := n.Client.(processor)
	if !ok {
		return sc.script.Run(ctx, n.Client, sc.keys, sc.args...)
	}
	cmd := redis.NewCmd(ctx, sc.argsFor(n.Idx)...)
	if len(sc.keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	// HasErrorPrefix allocates: ask it only about an error.
	if err := p.Process(ctx, cmd); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		return sc.script.Eval(ctx, n.Client, sc.keys, sc.args...)
	}
	return cmd
}
