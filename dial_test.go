package redlock_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// Dial takes "host:port" as well as URLs, and rejects a port out of range as
// ErrInvalidArgument, without the password in the message.
func TestDial_HostPortAndPortRange(t *testing.T) {
	rl, err := redlock.Dial([]string{"127.0.0.1:7001", "redis://127.0.0.1:7002", "localhost:7003"})
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7001/0", "127.0.0.1:7002/0", "localhost:7003/0"}, rl.Nodes())
	require.NoError(t, rl.Close())

	_, err = redlock.Dial([]string{"127.0.0.1:7001", "redis://127.0.0.1:7001"})
	requireInvalid(t, err, "same node")

	for _, u := range []string{"127.0.0.1:99999", "redis://:s3cretPw@127.0.0.1:65536", "redis://127.0.0.1:0", "u:s3cretPw@127.0.0.1:70000"} {
		_, err := redlock.Dial([]string{"127.0.0.1:7001", u})
		requireInvalid(t, err, "node 2 of 2")
		assert.Contains(t, err.Error(), "out of range", u)
		assert.NotContains(t, err.Error(), "s3cretPw")
	}

	// go-redis takes a negative pool size (and panics making the client)
	// and a negative database number (every SELECT fails): Dial refuses
	// both.
	for _, u := range []string{"redis://:s3cretPw@127.0.0.1:7002?pool_size=-1", "redis://:s3cretPw@127.0.0.1:7002/-1"} {
		_, err := redlock.Dial([]string{"127.0.0.1:7001", u})
		requireInvalid(t, err, "node 2 of 2")
		assert.Contains(t, err.Error(), "must not be negative", u)
		assert.NotContains(t, err.Error(), "s3cretPw")
	}
}
