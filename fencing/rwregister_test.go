package fencing_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/fencing"
)

// Writer 10 writes, readers of 10 read, writer 20 writes: a late read of 10
// raced the newer write, a late write of 10 or of 20 (once read) is a
// stale writer's; readers of 20 read, writer 30 writes.
func TestRWRegister(t *testing.T) {
	var r fencing.RWRegister
	require.NoError(t, r.CheckWrite(10))
	require.NoError(t, r.CheckWrite(10), "the writer writes again")
	require.NoError(t, r.CheckRead(10))
	require.NoError(t, r.CheckRead(10), "readers together")
	require.ErrorIs(t, r.CheckWrite(10), fencing.ErrStale, "writer 10 paused past its lock: readers followed it")
	require.NoError(t, r.CheckWrite(20))
	require.ErrorIs(t, r.CheckRead(10), fencing.ErrStale, "a read that raced a newer write")
	require.ErrorIs(t, r.CheckWrite(10), fencing.ErrStale)
	require.NoError(t, r.CheckRead(20))
	require.ErrorIs(t, r.CheckWrite(20), fencing.ErrStale)
	require.NoError(t, r.CheckWrite(30))

	var fresh fencing.RWRegister
	require.NoError(t, fresh.CheckRead(0), "before any writer, readers carry token 0")
	require.NoError(t, fresh.CheckWrite(5))
}
