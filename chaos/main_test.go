package chaos

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind. It
// silences go-redis's own logger, as the package doc of redlock advises:
// the scenarios kill and cut off nodes on purpose, and thousands of
// "failed to dial" lines would bury the test output.
func TestMain(m *testing.M) {
	redis.SetLogger(&logging.VoidLogger{})
	goleak.VerifyTestMain(m)
}
