package redlock

// The names of a lock's bookkeeping keys beside the lock key on each node.

import (
	"fmt"
	"strings"
)

// fenceKey names the fencing counter of lock key name: "{name}:fence", or
// "name:fence" when name already has a hash tag (see SiblingKey).
func fenceKey(name string) string { return SiblingKey(name, ":fence") }

// epochKey names the amnesia guard's epoch of lock key name (a hash with
// `born` and `trusted`): "{name}:epoch", or "name:epoch" (see SiblingKey).
func epochKey(name string) string { return SiblingKey(name, ":epoch") }

// SiblingKey names a key kept beside the key name (as it is on the nodes,
// prefix included) in its Redis Cluster hash slot, as the library keeps a
// lock's fencing counter (":fence") and amnesia guard epoch (":epoch"), and
// redlock exec its holder record (":holder"). It appends suffix; a name
// without a hash tag becomes the tag: "{name}suffix". A name that has one
// keeps it: "namesuffix". Acquire refuses the names for which neither works
// (a brace but no tag, such as "a{}b").
func SiblingKey(name, suffix string) string {
	if hasHashTag(name) {
		return name + suffix
	}
	return "{" + name + "}" + suffix
}

// hasHashTag reports whether name has a Redis Cluster hash tag: a "{"
// followed, later, by a "}" with at least one byte between them.
func hasHashTag(name string) bool {
	open := strings.IndexByte(name, '{')
	return open >= 0 && strings.IndexByte(name[open+1:], '}') > 0
}

// checkKeyName rejects a lock key (prefix included) whose fencing counter
// and epoch could not share its Redis Cluster slot: one with a brace but no
// valid hash tag, such as "a}b" or "a{}b".
func checkKeyName(name string) error {
	if !hasHashTag(name) && strings.ContainsAny(name, "{}") {
		return fmt.Errorf("%w: key %s has a brace but no hash tag (\"{tag}\"): its fencing counter could not share its cluster slot", ErrInvalidArgument, keyText(name))
	}
	return nil
}
