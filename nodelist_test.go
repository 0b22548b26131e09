package redlock_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// ParseNodes gives Dial's URLs for a comma list; a slip that would leave a
// node out of the quorum (an empty entry) is an error that names the entry
// by its index and never shows the list, which may hold passwords.
func TestParseNodes(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"127.0.0.1:7001", []string{"redis://127.0.0.1:7001"}},
		{" a:1 , rediss://u:pw@b:2/3,unix:///tmp/r.sock ", []string{"redis://a:1", "rediss://u:pw@b:2/3", "unix:///tmp/r.sock"}},
	} {
		got, err := redlock.ParseNodes(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, tc := range []struct{ in, msg string }{
		{"a:1,,b:2", "node 2 of 3 is empty"},
		{"redis://:s3cretPw@a:1,b:2,", "node 3 of 3 is empty"},
		{",a:1", "node 1 of 2 is empty"},
		{"a:1, ,b:2", "node 2 of 3 is empty"},
		{",", "node 1 of 2 is empty"},
		{"", "no nodes"},
		{" \t ", "no nodes"},
	} {
		got, err := redlock.ParseNodes(tc.in)
		assert.Nil(t, got, tc.in)
		requireInvalid(t, err, tc.msg)
		assert.NotContains(t, err.Error(), "s3cretPw")
		assert.NotContains(t, err.Error(), "a:1")
	}

	urls, err := redlock.ParseNodes("127.0.0.1:7001,localhost:7002")
	require.NoError(t, err)
	rl, err := redlock.Dial(urls)
	require.NoError(t, err)
	assert.Equal(t, []string{"127.0.0.1:7001/0", "localhost:7002/0"}, rl.Nodes())
	require.NoError(t, rl.Close())
}

// SiblingKey names keys the way the library names a lock's own bookkeeping:
// the fencing counter of a lock is SiblingKey(name, ":fence") on the nodes,
// with and without a hash tag in the name.
func TestSiblingKey(t *testing.T) {
	assert.Equal(t, "{job}:holder", redlock.SiblingKey("job", ":holder"))
	assert.Equal(t, "lock:{42}:holder", redlock.SiblingKey("lock:{42}", ":holder"))
	assert.Equal(t, "{a{}b}:holder", redlock.SiblingKey("a{}b", ":holder"), "an empty tag is no tag")
	assert.Equal(t, redlock.ElectionKey("e"), redlock.SiblingKey("e", ":leader"))
	assert.Equal(t, redlock.PermitKey("s", 1), redlock.SiblingKey("s", ":permit:1"))
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newCluster(t, 3, redlock.WithKeyPrefix("p:"))
		for _, key := range []string{"job", "lock:{42}"} {
			l := c.acquire(t, ctx, key, ttl10s)
			for i, n := range c.nodes {
				assert.True(t, n.Has(redlock.SiblingKey("p:"+key, ":fence")), "node %d, key %q", i, key)
			}
			require.NoError(t, l.Release(ctx))
		}
	})
}
