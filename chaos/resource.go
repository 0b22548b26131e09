package chaos

import "github.com/d3b93e30/redlock/fencing"

// resources are the two shared stores every hold writes to, throughout the
// hold. The plain store checks nothing (every write is accepted): it shows
// what a lock without fencing protects, and it accepts a paused holder's
// stale write. The fenced store is the repository's own fencing.Guard, the
// guard that ships, so every chaos run tests it (Kleppmann's fencing: the
// storage checks the token). Like the Guard it accepts an equal token, so
// that one holder may write several times; two holders given the same token
// would both pass, and the oracle then counts the older one's accepted
// writes after the newer one's as stale fenced writes, while its token-order
// check reports the repeated token. With fencing off (every token 0) it
// accepts everything. The values written are not kept: the oracle records
// each write and whether it was accepted.
type resources struct {
	fenced *fencing.Guard
}

func newResources() resources { return resources{fenced: new(fencing.Guard)} }

// writePlain writes to the plain store, which accepts everything.
func (resources) writePlain(uint64) bool { return true }

// writeFenced writes to the fenced store and reports whether the Guard
// accepted token (at least the highest it accepted so far).
func (r resources) writeFenced(token uint64) bool { return r.fenced.Check(token) == nil }
