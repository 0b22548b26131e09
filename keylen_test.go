package redlock_test

import (
	"bytes"
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock"
)

// Keys longer than MaxKeyLen are refused before any node is asked, and no
// error or log line shows more than a short prefix of a key.

func TestKey_LongerThanMaxKeyLenIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ev := &eventLog{}
		c := newCluster(t, 3, redlock.WithObserver(ev))
		ctx := context.Background()
		for _, n := range []int{redlock.MaxKeyLen + 1, 10 << 20} {
			key := strings.Repeat("k", n)
			errs := map[string]error{}
			_, errs["Acquire"] = c.rl.Acquire(ctx, key, time.Second)
			_, errs["TryAcquire"] = c.rl.TryAcquire(ctx, key, time.Second)
			_, errs["Inspect"] = c.rl.Inspect(ctx, key)
			errs["Do"] = c.rl.Do(ctx, key, time.Second, func(context.Context, *redlock.Lease) error {
				t.Error("fn ran with a refused key")
				return nil
			})
			for call, err := range errs {
				require.ErrorIs(t, err, redlock.ErrInvalidArgument, "%s, %d bytes", call, n)
				assert.Contains(t, err.Error(), "longer than 4096 bytes", call)
				assert.Contains(t, err.Error(), "("+strconv.Itoa(n)+" bytes)", "%s: the error gives the key's length", call)
				assert.Less(t, len(err.Error()), 200, "%s: %q", call, err)
			}
		}
		assert.Empty(t, ev.events, "no node was asked")
		for i, n := range c.nodes {
			assert.Empty(t, n.m.Keys(), "node %d", i)
		}

		// MaxKeyLen itself is a key, whatever the prefix.
		key := strings.Repeat("k", redlock.MaxKeyLen)
		for _, opts := range [][]redlock.Option{nil, {redlock.WithKeyPrefix("lock:")}} {
			l, err := c.rl.TryAcquire(ctx, key, time.Second, opts...)
			require.NoError(t, err)
			c.releaseAndRequireGone(t, ctx, l, key)
			c.nodes[0].m.FlushAll()
			c.nodes[1].m.FlushAll()
			c.nodes[2].m.FlushAll()
		}
	})
}

func TestKey_ErrorsAndLogsShowAShortPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var (
			mu  sync.Mutex
			buf bytes.Buffer
		)
		logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		c := newCluster(t, 3, redlock.WithLogger(logger))
		ctx := context.Background()
		key := "report:" + strings.Repeat("é", 2000) // 4007 bytes, a 2-byte character across the cut
		c.holdElsewhere(t, key, time.Minute, 0, 1, 2)
		_, err := c.rl.TryAcquire(ctx, key, time.Second)
		require.ErrorIs(t, err, redlock.ErrTaken)
		msg := err.Error()
		assert.Less(t, len(msg), 400, msg)
		assert.Contains(t, msg, `"report:`+strings.Repeat("é", 20)+`"… (4007 bytes)`)

		// A lost lock's cause and Do's error name it the same way.
		c.nodes[0].m.FlushAll()
		c.nodes[1].m.FlushAll()
		c.nodes[2].m.FlushAll()
		err = c.rl.Do(ctx, key, time.Second, func(ctx context.Context, _ *redlock.Lease) error {
			for _, n := range c.nodes {
				require.NoError(t, n.m.Set(key, "thief"))
			}
			<-ctx.Done()
			return context.Cause(ctx)
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)
		assert.Less(t, len(err.Error()), 600, err.Error())
		assert.Equal(t, 2, strings.Count(err.Error(), "(4007 bytes)"), "the loss and its extension's error: %v", err)

		mu.Lock()
		out := buf.String()
		mu.Unlock()
		require.NotEmpty(t, out)
		for line := range strings.Lines(out) {
			assert.Less(t, len(line), 600, line)
		}
		assert.Contains(t, out, `key="report:`+strings.Repeat("é", 20)+`… (4007 bytes)"`)
	})
}
