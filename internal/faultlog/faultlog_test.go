package faultlog

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// A scheduled fault runs after its delay; Stop cancels the ones still
// pending, and one whose trial ended does not run.
func TestLog_AfterRunsUntilStopOrTheTrialEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := New(oracle.NewOracle())
		ctx, cancel := context.WithCancel(t.Context())
		var ran, late, ended atomic.Int32
		l.After(ctx, time.Second, func() { ran.Add(1) })
		l.After(ctx, 3*time.Second, func() { late.Add(1) })
		endedCtx, endTrial := context.WithCancel(t.Context())
		l.After(endedCtx, time.Second, func() { ended.Add(1) })
		endTrial()
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, int32(1), ran.Load())
		assert.Zero(t, ended.Load(), "the trial ended before the fault was due")
		l.Stop()
		cancel()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Zero(t, late.Load(), "Stop cancelled the pending fault")
	})
}

// Close ends the matching open bands; Stop ends the rest at the trial's end.
// Each ended band is one fault band in the oracle, from its opening to its
// end.
func TestLog_BandsEndInTheOracle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		o := oracle.NewOracle()
		l := New(o)
		t0 := time.Now()
		l.Open(Band{Node: 0, What: "killed"}, t0)
		l.Open(Band{Node: 1, What: "replies lost", Network: true}, t0)
		l.Open(Band{Node: 2, What: "partitioned", Network: true}, t0)
		time.Sleep(time.Second)
		l.Close(time.Now(), func(b Band) bool { return b.Node == 1 && b.Network })
		time.Sleep(time.Second)
		l.Stop()

		faults := map[string][2]time.Duration{}
		for _, f := range o.History().Faults {
			faults[f.What] = [2]time.Duration{f.From, f.To}
		}
		require.Len(t, faults, 3)
		assert.Equal(t, [2]time.Duration{0, time.Second}, faults["replies lost"])
		assert.Equal(t, [2]time.Duration{0, 2 * time.Second}, faults["killed"])
		assert.Equal(t, [2]time.Duration{0, 2 * time.Second}, faults["partitioned"])
	})
}
