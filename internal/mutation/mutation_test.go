package mutation

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A nil *Knobs, the only value outside the harness, changes nothing.
func TestKnobs_NilChangesNothing(t *testing.T) {
	var k *Knobs
	start, at := time.Now(), time.Now().Add(time.Second)
	assert.Equal(t, 3, k.Quorum(5, 3))
	assert.Equal(t, start, k.AcquireStart(start, at))
	assert.False(t, k.IgnoresLoss())
	assert.False(t, k.NeverExtends())

	assert.Equal(t, 1, (&Knobs{QuorumOne: true}).Quorum(5, 3))
	assert.Equal(t, 2, (&Knobs{QuorumHalf: true}).Quorum(5, 3))
	assert.Equal(t, 2, (&Knobs{QuorumHalf: true}).Quorum(4, 3))
	assert.Equal(t, at, (&Knobs{NoElapsed: true}).AcquireStart(start, at))
}

// The hook runs the mutated source wherever the library would run the
// original, by EVALSHA or EVAL, and leaves other scripts alone.
func TestScriptHook_RunsTheMutatedScript(t *testing.T) {
	const orig = "return 'original'"
	old := Scripts
	Scripts = map[string]string{"test": orig}
	t.Cleanup(func() { Scripts = old })

	mutated, err := Compile([]Rewrite{{Script: "test", Old: "'original'", New: "'mutated'"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{SHA(orig): "return 'mutated'"}, mutated)

	m := miniredis.RunT(t)
	rc := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rc.Close()
	rc.AddHook(ScriptHook(mutated))
	ctx := context.Background()

	got, err := redis.NewScript(orig).Run(ctx, rc, nil).Text()
	require.NoError(t, err)
	assert.Equal(t, "mutated", got)
	got, err = rc.Eval(ctx, orig, nil).Text()
	require.NoError(t, err)
	assert.Equal(t, "mutated", got)
	got, err = redis.NewScript("return 'other'").Run(ctx, rc, nil).Text()
	require.NoError(t, err)
	assert.Equal(t, "other", got)
}

// A rewrite whose text is not in its script fails loudly.
func TestCompile_StaleRewriteFails(t *testing.T) {
	old := Scripts
	Scripts = map[string]string{"test": "return 1"}
	t.Cleanup(func() { Scripts = old })
	_, err := Compile([]Rewrite{{Script: "test", Old: "return 2", New: "return 3"}})
	assert.ErrorContains(t, err, "no longer contains")
	_, err = Compile([]Rewrite{{Script: "test", Old: "return 1", New: "return 1"}})
	assert.Error(t, err)
	_, err = Compile([]Rewrite{{Script: "nope", Old: "a", New: "b"}})
	assert.ErrorContains(t, err, "no library script")
}
