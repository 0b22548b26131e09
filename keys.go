package redlock

// The names of a lock's bookkeeping keys beside the lock key on each node.

import (
	"fmt"
	"strings"
)

// fenceKey names the fencing counter of lock key name: "{name}:fence", or
// "name:fence" when name already has a hash tag (see slotKey).
func fenceKey(name string) string { return slotKey(name, ":fence") }

// epochKey names the amnesia guard's epoch of lock key name (a hash with
// `born` and `trusted`): "{name}:epoch", or "name:epoch" (see slotKey).
func epochKey(name string) string { return slotKey(name, ":epoch") }

// slotKey appends suffix to name so that the result shares name's Redis
// Cluster hash slot: the slot of a key without a hash tag is that of the
// whole key, so it becomes the tag ("{name}suffix"); a key that has a tag
// keeps it ("namesuffix"). checkKeyName rejects the names for which neither
// works.
func slotKey(name, suffix string) string {
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
