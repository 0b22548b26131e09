package main

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// helpExamples returns the example command lines of `redlock chaos --help`,
// without their trailing "# ..." comments.
func helpExamples(t *testing.T) [][]string {
	t.Helper()
	var ex [][]string
	for _, l := range strings.Split(chaosHelp, "\n") {
		if strings.HasPrefix(l, "  redlock chaos") {
			l, _, _ = strings.Cut(l, " #")
			ex = append(ex, strings.Fields(l)[1:])
		}
	}
	require.NotEmpty(t, ex)
	return ex
}

func TestChaosHelp_OnStdout(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--help")
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "Examples:")
	assert.Contains(t, out, "-mutants")
	assert.Empty(t, errOut)
}

// Every example in the help must be a valid command line; the quick ones are
// run to the end and must pass.
func TestChaosHelp_ExamplesRun(t *testing.T) {
	for _, ex := range helpExamples(t) {
		_, err := parseChaosFlags(ex[1:], new(bytes.Buffer), new(bytes.Buffer))
		require.NoError(t, err, "example %q", strings.Join(ex, " "))
		if !strings.Contains(strings.Join(ex, " "), "--scenario") {
			continue // the full catalogue, the mutants, redis-server: too long for a unit test
		}
		args := append([]string{}, ex...)
		dir := t.TempDir()
		for i := range args {
			if i > 0 && args[i-1] == "--svg" {
				args[i] = dir
			}
		}
		args = append(args, "--quiet", "--trials", "1", "--time-scale", testTimeScale)
		code, out, errOut := runCLI(t, args...)
		assert.Equal(t, 0, code, "example %q:\n%s\n%s", strings.Join(ex, " "), out, errOut)
		assert.Contains(t, out, " as expected")
		if strings.Contains(strings.Join(ex, " "), "--svg") {
			svgs, _ := filepath.Glob(filepath.Join(dir, "*.svg"))
			assert.NotEmpty(t, svgs)
		}
	}
}

// A run where every scenario is skipped tested nothing: it must not pass.
func TestChaos_OnlySkippedIsNotAPass(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--nodes", "2", "--scenario", "minority-killed", "--scenario", "lost-replies", "--quiet")
	assert.Equal(t, exitMismatch, code)
	assert.Contains(t, out, "0 of 0 as expected (2 skipped): nothing was tested")
	assert.Contains(t, errOut, "every scenario was skipped")
}

// The table has a legend, each scenario's reason and a final line, and no
// line ends in spaces.
func TestChaos_TableReadable(t *testing.T) {
	code, out, _ := runCLI(t, "chaos", "--scenario", "majority-killed", "--scenario", "no-faults", "--trials", "1", "--quiet", "--time-scale", testTimeScale)
	assert.Equal(t, 0, code, out)
	for i, l := range strings.Split(out, "\n") {
		assert.Equal(t, strings.TrimRight(l, " \t"), l, "line %d ends in spaces", i+1)
	}
	assert.Contains(t, out, "STALE PLAIN/FENCED  writes a resource accepted")
	assert.Contains(t, out, "  no-faults: a key is only granted")
	assert.True(t, strings.HasSuffix(out, "2 of 2 as expected\n"), out)
}

// Seeds are uint64: JSON gives them as strings, so readers with float64
// numbers (JavaScript, older jq) do not round them.
func TestChaos_JSONSeedIsString(t *testing.T) {
	code, out, _ := runCLI(t, "chaos", "--scenario", "majority-killed", "--trials", "1", "--quiet", "--json", "--seed", "18446744073709551557", "--time-scale", testTimeScale)
	require.Equal(t, 0, code, out)
	var doc struct {
		Seed      string  `json:"seed"`
		TimeScale float64 `json:"time_scale"`
		Results   []struct {
			Seed string `json:"seed"`
		} `json:"results"`
		Summary string `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "18446744073709551557", doc.Seed)
	require.Len(t, doc.Results, 1)
	assert.Equal(t, "18446744073709551557", doc.Results[0].Seed)
	assert.Equal(t, "1 of 1 as expected", doc.Summary)
	assert.Equal(t, 3.0, doc.TimeScale)
}

// testTimeScale stretches the scenarios these tests run: the race detector
// makes every call several times slower, and CI runs the other packages'
// tests on the same 2 cores at the same time (a no-faults trial at scale 1
// once made no acquisition there).
const testTimeScale = "3"

// --time-scale stretches the trials: majority-killed's trial lasts 350 ms
// at scale 1, so at scale 4 the run takes at least 1.4 s (a lower bound,
// which a loaded machine only makes longer). A factor below 1 or above 100,
// or one that is not a number, is a usage error (1e308 once overflowed the
// durations and every trial "failed").
func TestChaos_TimeScale(t *testing.T) {
	start := time.Now()
	code, out, errOut := runCLI(t, "chaos", "--scenario", "majority-killed", "--trials", "1", "--time-scale", "4")
	require.Equal(t, 0, code, out)
	assert.GreaterOrEqual(t, time.Since(start), 1400*time.Millisecond)
	assert.Contains(t, errOut, "time scale 4")
	for _, bad := range []string{"0.5", "0", "-2", "NaN", "+Inf", "x", "100.5", "1e9", "1e308"} {
		code, _, errOut := runCLI(t, "chaos", "--scenario", "majority-killed", "--time-scale", bad)
		assert.Equal(t, exitUsage, code, bad)
		assert.Contains(t, errOut, "time-scale", bad)
	}
}
