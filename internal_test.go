package redlock

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
)

func TestDefaultNodeTimeout(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{
		10 * time.Second:       100 * time.Millisecond, // 1%
		30 * time.Second:       300 * time.Millisecond,
		5 * time.Minute:        time.Second,             // capped at 1 s
		time.Second:            20 * time.Millisecond,   // floor
		15 * time.Millisecond:  7500 * time.Microsecond, // never above half the ttl
		100 * time.Millisecond: 20 * time.Millisecond,
	} {
		got := defaultNodeTimeout(ttl)
		assert.Equal(t, want, got, "ttl %v", ttl)
		assert.Less(t, got, ttl, "ttl %v: the timeout must leave validity", ttl)
	}
}

func TestFenceKeySharesHashSlot(t *testing.T) {
	for name, want := range map[string]string{
		"report":              "{report}:fence",
		"lock:report:{42}":    "lock:report:{42}:fence", // keeps the user's hash tag
		"lock:{}":             "{lock:{}}:fence",        // an empty tag is no tag
		"lock:{unterminated":  "{lock:{unterminated}:fence",
		"lock:report:client7": "{lock:report:client7}:fence",
	} {
		assert.Equal(t, want, fenceKey(name), name)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    reply
		want Outcome
	}{
		{"applied", reply{code: codeApplied}, OutcomeGranted},
		{"taken", reply{code: codeTaken}, OutcomeTaken},
		{"not held", reply{code: codeNotHeld}, OutcomeNotHeld},
		{"canceled", reply{err: context.Canceled}, OutcomeCanceled},
		{"deadline", reply{err: context.DeadlineExceeded}, OutcomeTimedOut},
		{"net timeout", reply{err: &net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}}, OutcomeTimedOut},
		{"refused", reply{err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, OutcomeUnreachable},
		{"eof", reply{err: io.EOF}, OutcomeUnreachable},
		{"client closed", reply{err: redis.ErrClosed}, OutcomeUnreachable},
		{"redis error reply", reply{err: redisErr("NOSCRIPT No matching script")}, OutcomeError},
		{"wrapped redis error reply", reply{err: errors.Join(errors.New("x"), redisErr("OOM"))}, OutcomeError},
	} {
		assert.Equal(t, tc.want, classify(tc.r), tc.name)
	}
}

// redisErr is an error reply as go-redis returns it (it implements
// redis.Error).
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

var _ redis.Error = redisErr("")

// A key whose braces form no hash tag cannot have its counter and epoch in
// its own cluster slot: it is refused rather than split across slots.
func TestCheckKeyName(t *testing.T) {
	for _, ok := range []string{"report", "lock:report:{42}", "{a}b}", "x{y}z"} {
		assert.NoError(t, checkKeyName(ok), ok)
	}
	for _, bad := range []string{"a}b", "lock:{}", "lock:{unterminated", "}{"} {
		assert.ErrorIs(t, checkKeyName(bad), ErrInvalidArgument, bad)
	}
}
