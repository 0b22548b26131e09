package main

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Flag errors say what is wrong: a duration without its unit (flag's own
// message was "parse error"), and which duration flag is negative (the
// message named all six).
func TestUsage_SaysWhatIsWrong(t *testing.T) {
	t.Setenv("REDLOCK_NODES", "")
	for _, tc := range []struct {
		name    string
		args    []string
		want    string
		notWant string
	}{
		{"ttl without unit", []string{"exec", "--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "5", "--", "true"}, `invalid value "5" for flag -ttl: missing unit: write 5s`, "parse error"},
		{"wait with an unknown unit", []string{"exec", "--nodes", "127.0.0.1:1", "--key", "k", "--wait", "5sec", "--", "true"}, `for flag -wait: unknown unit "sec"`, "parse error"},
		{"not a duration", []string{"exec", "--nodes", "127.0.0.1:1", "--key", "k", "--grace", "soon", "--", "true"}, `for flag -grace: invalid duration "soon": write a number and a unit`, "parse error"},
		{"status timeout without unit", []string{"status", "--nodes", "127.0.0.1:1", "--key", "k", "--timeout", "2"}, `for flag -timeout: missing unit: write 2s`, "parse error"},
		{"negative grace", []string{"exec", "--nodes", "127.0.0.1:1", "--key", "k", "--grace", "-1s", "--", "true"}, "--grace -1s must not be negative", "--wait"},
		{"negative node-timeout", []string{"exec", "--nodes", "127.0.0.1:1", "--key", "k", "--node-timeout", "-5ms", "--", "true"}, "--node-timeout -5ms must not be negative", "--grace"},
		// An extension at 100ms that takes its whole 100ms timeout ends
		// 5ms before the kill guard would kill COMMAND (295ms − 100ms).
		{"ttl too short for the kill guard", []string{"exec", "--nodes", "127.0.0.1:1", "--key", "k", "--ttl", "300ms", "--", "true"},
			"--ttl 300ms is too short for the kill guard: COMMAND gets SIGKILL 100ms before the lock's validity (295ms) ends", "panic"},
		{"elect ttl too short for the kill guard", []string{"elect", "--nodes", "127.0.0.1:1", "--name", "n", "--ttl", "1s", "--extend-every", "800ms", "--", "true"},
			"--ttl 1s is too short for the kill guard", "panic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantUsageError(t, tc.want, tc.args...)
			_, _, errOut := runCLI(t, tc.args...)
			assert.NotContains(t, errOut, tc.notWant)
		})
	}
}

// The help shows the duration flags' values as "duration", as flag does
// for its own duration flags.
func TestHelp_DurationFlags(t *testing.T) {
	for _, args := range [][]string{{"exec", "--help"}, {"status", "--help"}} {
		code, out, _ := runCLI(t, args...)
		assert.Equal(t, 0, code)
		assert.NotContains(t, out, " value\n", args)
		assert.Contains(t, out, " duration\n", args)
	}
	_, out, _ := runCLI(t, "exec", "--help")
	assert.Contains(t, out, "  -ttl duration\n")
	assert.Contains(t, out, "(default 30s)")
}

// Every line of each subcommand's help, the flag list included, fits in 80
// columns: flag.PrintDefaults never wraps a flag's usage.
func TestHelp_FitsIn80Columns(t *testing.T) {
	for _, sub := range []string{"exec", "status", "elect", "chaos", "soak"} {
		code, out, _ := runCLI(t, sub, "--help")
		require.Equal(t, 0, code, sub)
		require.Contains(t, out, "\nFlags:\n", sub)
		for i, l := range strings.Split(out, "\n") {
			assert.LessOrEqual(t, utf8.RuneCountInString(l), 80, "redlock %s --help, line %d: %q", sub, i+1, l)
			assert.NotContains(t, l, "\t", "redlock %s --help, line %d: a tab's width depends on the terminal", sub, i+1)
		}
	}
	// The wrapped flag list still names each flag with its type and default.
	_, out, _ := runCLI(t, "exec", "--help")
	assert.Contains(t, out, "  -quarantine duration\n")
	assert.Contains(t, out, "(default 1m0s)")
	assert.Contains(t, out, "(default 75)")
	_, out, _ = runCLI(t, "elect", "--help")
	assert.Contains(t, out, `(default "REDLOCK_TERM")`)
}
