//go:build race

package chaos

// soakUnderRace reports whether the tests run under the race detector.
const soakUnderRace = true
