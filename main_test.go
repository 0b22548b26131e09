package redlock_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind. It
// silences go-redis's own logger (as the package doc advises): tests kill
// nodes on purpose, and every node's outcome is in the errors they check.
func TestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m)
}
