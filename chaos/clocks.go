package chaos

import (
	"fmt"
	"time"
)

// ClockMode says how the redis-server backend moves a node's clock for
// JumpClock and SetClockRate.
type ClockMode string

const (
	// ClockAuto (the default) uses real clocks where a C compiler is found
	// to build the clock shim, and emulates them on the keys otherwise.
	ClockAuto ClockMode = ""
	// ClockReal moves each redis-server's own wall clock: a small shared
	// object, compiled at start with the system's C compiler, is preloaded
	// into every server and reads its offset and rate from a file the
	// harness maps (internal/clockshim). TIME and key expiry move, forward
	// and back, at any rate. NewCluster fails without a C compiler.
	ClockReal ClockMode = "real"
	// ClockEmulated leaves the servers on the machine's clock and shortens
	// the keys' TTLs instead: expiry moves forward, TIME does not, and
	// backward steps and rates below 1 return ErrUnsupported.
	ClockEmulated ClockMode = "emulated"
)

// ParseClockMode returns the ClockMode named s: "auto" (or ""), "real" or
// "emulated". Any other name is an error that lists the valid ones.
func ParseClockMode(s string) (ClockMode, error) {
	switch s {
	case "", "auto":
		return ClockAuto, nil
	case string(ClockReal), string(ClockEmulated):
		return ClockMode(s), nil
	}
	return "", fmt.Errorf("chaos: unknown clock mode %q (want auto, real or emulated)", s)
}

func (m ClockMode) check() error {
	_, err := ParseClockMode(string(m))
	return err
}

// inProcessClocks describes the clocks of in-process nodes.
const inProcessClocks = "in-process: each miniredis has its own clock (TIME and key expiry), which moves forward only"

// Clocks says how the nodes' clocks move under JumpClock and SetClockRate,
// in a sentence for a run's output: in-process, real (the clock shim), or
// emulated on the keys, and why.
func (c *Cluster) Clocks() string { return c.clocks }

// clockStepLabel names a clock step in a trial's history: "clock +1s",
// "clock -10s".
func clockStepLabel(d time.Duration) string {
	if d < 0 {
		return "clock " + d.String()
	}
	return "clock +" + d.String()
}

// unsupportedClockFault returns why the cluster's clocks cannot produce one
// of s's clock faults (a step back, or a rate below 1, where the clock
// cannot do it), or "" when they all can: Run then skips s at once rather
// than after a trial.
func (c *Cluster) unsupportedClockFault(s Scenario) string {
	if len(c.nodes) == 0 {
		return ""
	}
	be := c.nodes[0].be
	for _, f := range s.Faults {
		switch {
		case f.Action == ActionJumpClock && f.Amount < 0 && !be.stepsBack():
			return fmt.Sprintf("%v: a clock step back (%v) needs real clocks on redis-server; clocks here are %s", errUnsupported, f.Amount, c.clocks)
		case f.Action == ActionClockRate && f.Rate < 1 && be.emulatesClock():
			return fmt.Sprintf("%v: a clock rate below 1 (%v) cannot be emulated; clocks here are %s", errUnsupported, f.Rate, c.clocks)
		}
	}
	return ""
}
