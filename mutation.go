package redlock

import (
	"reflect"

	"github.com/redis/go-redis/v9"

	"github.com/d3b93e30/redlock/internal/mutation"
)

// This file connects the chaos harness's mutants (internal/mutation) to the
// library; users cannot reach it. The knobs travel in a Client's config and
// are read by the lines marked "chaos mutant hook"; a nil *mutation.Knobs,
// the only value outside the harness, changes nothing.
func init() {
	mutation.NewOption = func(k *mutation.Knobs) any {
		return Option(func(c *config) error {
			c.mutant = k
			return nil
		})
	}
	for name, s := range map[string]*redis.Script{
		"acquire":       acquireScript,
		"fence":         fenceScript,
		"reput":         reputScript,
		"release":       releaseScript,
		"abandon":       abandonScript,
		"release-vouch": releaseVouchScript,
		"hold":          holdScript,
		"extend":        extendScript,
	} {
		mutation.Scripts[name] = scriptSource(s)
	}
}

// scriptSource returns a script's Lua source. go-redis keeps it unexported;
// the harness's script mutants rewrite it on the wire.
func scriptSource(s *redis.Script) string {
	return reflect.ValueOf(s).Elem().FieldByName("src").String()
}
