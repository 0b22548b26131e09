package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

func TestOutcome_String(t *testing.T) {
	for o, want := range map[redlock.Outcome]string{
		redlock.OutcomePending:     "pending",
		redlock.OutcomeGranted:     "granted",
		redlock.OutcomeTaken:       "taken",
		redlock.OutcomeNotHeld:     "not-held",
		redlock.OutcomeUnreachable: "unreachable",
		redlock.OutcomeTimedOut:    "timed-out",
		redlock.OutcomeCanceled:    "canceled",
		redlock.OutcomeError:       "error",
		redlock.Outcome(-1):        "unknown",
		redlock.Outcome(99):        "unknown",
	} {
		assert.Equal(t, want, o.String())
	}
}

func TestQuorumError_Unwrap(t *testing.T) {
	qe := &redlock.QuorumError{Op: "acquire", Key: "k", Quorum: 2, Err: redlock.ErrNotAcquired, Cause: context.Canceled}
	assert.ErrorIs(t, qe, redlock.ErrNotAcquired)
	assert.ErrorIs(t, qe, context.Canceled)
	assert.NotErrorIs(t, qe, redlock.ErrNotHeld)

	qe = &redlock.QuorumError{Op: "release", Key: "k", Quorum: 2, Err: redlock.ErrNotHeld}
	assert.ErrorIs(t, qe, redlock.ErrNotHeld)
	assert.NotErrorIs(t, qe, context.Canceled)
	wrapped := fmt.Errorf("report job: %w", qe)
	var got *redlock.QuorumError
	require.True(t, errors.As(wrapped, &got))
	assert.Same(t, qe, got)
}
