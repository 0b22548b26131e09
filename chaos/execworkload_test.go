package chaos

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/execjob"
)

// The supervisor's signals to an exec job are noted while its exit has not
// been seen, so that a trial whose job outlived its lock tells a late
// SIGKILL from an exit seen late; once the exit is seen, nothing is noted.
func TestWatchedJob_NotesTheSignalsSentBeforeTheExit(t *testing.T) {
	g, err := execjob.Start([]string{"sh", "-c", "sleep 60"}, nil, nil, nil)
	require.NoError(t, err)
	var notes []string
	j := watchJob(g, func(_ time.Time, text string) { notes = append(notes, text) })
	j.Signal(syscall.SIGKILL)
	st := <-j.Done()
	assert.Equal(t, 128+int(syscall.SIGKILL), st.Code)
	<-j.exited
	j.Signal(syscall.SIGTERM) // reaped: not sent, not noted
	assert.Equal(t, []string{"the job's group was sent SIGKILL"}, notes)
}

// A trial of an expected-safe scenario that is not safe carries the
// clients' notes, with their times, in the run's notes: here the
// exec-ignores-loss mutant's job outlives its lock, and the trial says when
// its exit was seen.
func TestRun_SurpriseTrialCarriesTheClientsNotes(t *testing.T) {
	needMutants(t) // exec-ignores-loss is a knob of the mutant build
	ctx := context.Background()
	cluster := newTestCluster(t, ClusterOptions{Nodes: 5})
	s, ok := Find("exec-asymmetric-partition")
	require.True(t, ok)
	m, ok := findMutant("exec-ignores-loss")
	require.True(t, ok)
	res, err := RunMutant(ctx, cluster, s.Scaled(testTimeScale), m, 2, 11, nil)
	require.NoError(t, err)
	require.Positive(t, res.Violations, "the mutant's job must outlive its lock; notes: %v", res.Notes)
	assert.True(t, slices.ContainsFunc(res.Notes, func(n string) bool {
		return strings.HasPrefix(n, "trial ") && strings.Contains(n, " ms: client 0: job stopped, the lock lost")
	}), "notes: %v", res.Notes)
}
