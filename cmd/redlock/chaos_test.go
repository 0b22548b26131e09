package main

import (
	"bytes"
	"encoding/json"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/internal/mutation"
)

// helpExamples returns the example command lines of `redlock chaos --help`,
// without their trailing "# ..." comments.
func helpExamples(t *testing.T) [][]string {
	t.Helper()
	var ex [][]string
	// An example too long for 80 columns goes on in the next line, after
	// a backslash.
	help := strings.ReplaceAll(chaosHelp, " \\\n    ", " ")
	for _, l := range strings.Split(help, "\n") {
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

// --fenced names the fenced resource: register (the default, fencing.Register)
// or redis; guard, its old name, still means fencing.Register.
func TestChaosFlags_Fenced(t *testing.T) {
	for _, v := range []string{"", "register", "guard", "redis"} {
		args := []string{}
		if v != "" {
			args = append(args, "--fenced", v)
		}
		f, err := parseChaosFlags(args, new(bytes.Buffer), new(bytes.Buffer))
		require.NoError(t, err, "--fenced %q", v)
		if v == "" {
			assert.Equal(t, "register", f.fenced)
		}
	}
	_, err := parseChaosFlags([]string{"--fenced", "memory"}, new(bytes.Buffer), new(bytes.Buffer))
	assert.ErrorContains(t, err, "want register or redis")
}

// A run where every scenario is skipped tested nothing: it must not pass.
func TestChaos_OnlySkippedIsNotAPass(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--nodes", "2", "--scenario", "minority-killed", "--scenario", "lost-replies", "--quiet")
	assert.Equal(t, exitMismatch, code)
	assert.Contains(t, out, "0 of 0 as expected (2 skipped): nothing was tested")
	assert.Contains(t, errOut, "every scenario was skipped")
}

// The default report has a legend and a final line, no line ends in
// spaces, and every line of it, progress included, fits an 80-column
// terminal; the trial lines and the reasons are left to -v.
func TestChaos_TableReadable(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--scenario", "majority-killed", "--scenario", "no-faults", "--trials", "1", "--time-scale", testTimeScale)
	assert.Equal(t, 0, code, out)
	for i, l := range strings.Split(out, "\n") {
		assert.Equal(t, strings.TrimRight(l, " \t"), l, "line %d ends in spaces", i+1)
	}
	assertFits(t, "stdout", out)
	assertFits(t, "stderr", errOut)
	assert.Contains(t, out, "STALE P/F  writes a resource accepted")
	assert.Regexp(t, `(?m)^no-faults +\d+ +0/1 +≤95% +0/0 +safe +safe$`, out)
	assert.NotContains(t, out, "no-faults: a key is only granted", "reasons are behind -v")
	assert.NotContains(t, errOut, "trial 1/1", "trial lines are behind -v")
	assert.True(t, strings.HasSuffix(out, "2 of 2 as expected\n"), out)
}

// -v prints each trial's progress, the wide table and each scenario's
// reason.
func TestChaos_Verbose(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--scenario", "majority-killed", "--trials", "1", "-v", "--time-scale", testTimeScale)
	assert.Equal(t, 0, code, out)
	assert.Contains(t, out, "STALE PLAIN/FENCED  writes a resource accepted")
	assert.Contains(t, out, "TRIALS  NOT SAFE  RATE (95%)  ACQUIRED  VIOLATIONS")
	assert.Regexp(t, `(?m)^majority-killed +inprocess +1 +0/1 +≤95% +0 +0 `, out)
	assert.Contains(t, out, "  majority-killed: no quorum can be formed")
	assert.Contains(t, errOut, "trial 1/1")
	assert.True(t, strings.HasSuffix(out, "1 of 1 as expected\n"), out)
}

// assertFits checks that every line of text is at most termWidth columns.
func assertFits(t *testing.T, name, text string) {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), termWidth, "%s line %d is wider than %d columns: %q", name, i+1, termWidth, l)
	}
}

// The default report fits 80 columns for every built-in scenario,
// on the backend with the longest name, with 1000 trials and counts to
// match (a 300-trial run takes under 50000 locks; its amnesia and clock
// rows count about 100 stale writes a trial), a mismatch, a skipped
// scenario, notes and the largest seed; so does the mutant report for every
// mutant.
func TestChaos_DefaultReportFitsEveryScenario(t *testing.T) {
	var results []chaos.Result
	for i, s := range chaos.Builtin() {
		r := chaos.Result{Scenario: s.Name, Backend: chaos.RedisServer, Nodes: 5, Trials: 1000, Expect: s.Expect, Observed: s.Expect,
			Why: s.Why, Acquisitions: 99999, Violations: 99999, StalePlain: 99999, StaleFenced: 999, TokenOrder: 999,
			UnsafeTrials: 999, BrokenTrials: 1, RateLower: 0.9952, RateUpper: 0.0047,
			Notes: []string{"trial 3: " + strings.Repeat("a stale write was accepted by the fenced resource ", 4)}}
		switch i {
		case 0:
			r.Observed = chaos.Broken
		case 1:
			r.Skipped = "the redis-server backend cannot " + strings.Repeat("do this ", 12)
		}
		results = append(results, r)
	}
	var out bytes.Buffer
	printTable(&out, results, math.MaxUint64, 1000, 99, chaos.RedisServer)
	assertFits(t, "scenario report", out.String())
	assert.Contains(t, out.String(), "broken !")
	assert.Contains(t, out.String(), "skipped")
	assert.Contains(t, out.String(), "1000/1000")
	assert.Contains(t, out.String(), "≥99%")

	var rows []mutantRow
	for _, m := range chaos.Mutants() {
		row := mutantRow{Mutant: m.Name, Summary: m.Summary, NotCovered: m.NotCovered, Caught: true}
		for _, name := range m.Scenarios {
			row.Results = append(row.Results, chaos.Result{Scenario: name, Trials: 3, Expect: chaos.Safe, Observed: chaos.Broken,
				Notes: []string{"trial 1: " + strings.Repeat("99 fencing tokens out of acquisition order ", 3)}})
		}
		rows = append(rows, row)
	}
	rows = append(rows, mutantRow{Mutant: "not-covered-yet", Summary: "x", NotCovered: strings.Repeat("no scenario can ", 10)})
	out.Reset()
	printMutants(&out, rows, math.MaxUint64, "14 of 14 mutants caught (1 not covered yet)", false)
	assertFits(t, "mutant report", out.String())
	assert.Contains(t, out.String(), "caught")
}

// The RATE cell gives the bound the run shows, never more: an upper bound
// rounded up, a lower one rounded down, to two significant digits.
func TestChaos_RateCell(t *testing.T) {
	cell := func(expect chaos.Verdict, k, n int) string {
		lower, upper := chaos.RateBounds(k, n)
		return rateBound(chaos.Result{Expect: expect, RateLower: lower, RateUpper: upper})
	}
	assert.Equal(t, "≤1.0%", cell(chaos.Safe, 0, 300))   // 0.9936 %
	assert.Equal(t, "≤9.6%", cell(chaos.Safe, 0, 30))    // 9.503 %
	assert.Equal(t, "≤78%", cell(chaos.Safe, 0, 2))      // 77.64 %
	assert.Equal(t, "≤0.30%", cell(chaos.Safe, 0, 1000)) // 0.2991 %
	assert.Equal(t, "≤100%", cell(chaos.Safe, 3, 3))
	assert.Equal(t, "≥99%", cell(chaos.Unsafe, 300, 300)) // 99.00 %
	assert.Equal(t, "≥90%", cell(chaos.Unsafe, 30, 30))   // 90.50 %
	assert.Equal(t, "≥22%", cell(chaos.Unsafe, 2, 2))     // 22.36 %
	assert.Equal(t, "≥0%", cell(chaos.Unsafe, 0, 8))
	assert.Equal(t, "30%", percent(0.3, math.Ceil), "no float error in the rounding")
}

// wrap breaks at spaces, keeps every word, and indents the lines after the
// first.
func TestWrap(t *testing.T) {
	text := "the quick brown fox jumps over the lazy dog"
	lines := wrap(text, "  ", "    ", 16)
	assert.Equal(t, []string{"  the quick", "    brown fox", "    jumps over", "    the lazy dog"}, lines)
	assert.Equal(t, []string{"x" + strings.Repeat("y", 30)}, wrap("x"+strings.Repeat("y", 30), "", "  ", 10), "a long word stays whole")
	assert.Equal(t, []string{""}, wrap("", "  ", "    ", 10))
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
			Seed   string   `json:"seed"`
			Unsafe *int     `json:"unsafe_trials"`
			Broken *int     `json:"broken_trials"`
			Lower  *float64 `json:"not_safe_rate_lower95"`
			Upper  *float64 `json:"not_safe_rate_upper95"`
		} `json:"results"`
		Summary string `json:"summary"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &doc))
	assert.Equal(t, "18446744073709551557", doc.Seed)
	require.Len(t, doc.Results, 1)
	assert.Equal(t, "18446744073709551557", doc.Results[0].Seed)
	r := doc.Results[0]
	require.True(t, r.Unsafe != nil && r.Broken != nil && r.Lower != nil && r.Upper != nil, "the trial counts and rate bounds are in the JSON")
	assert.Equal(t, [2]int{0, 0}, [2]int{*r.Unsafe, *r.Broken})
	assert.InDelta(t, 0.95, *r.Upper, 1e-9, "0 of 1 trial: at most 95 %")
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

// --list lists every scenario the harness has (the catalogue, the
// semaphore, the multi-key and the read/write lock's), once each, and --scenario accepts each name it
// lists; those a run without --scenario leaves out say so.
func TestChaos_ListsEveryScenario(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--list")
	require.Equal(t, 0, code, errOut)
	listed := map[string]string{}
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		name := strings.Fields(l)[0]
		require.NotContains(t, listed, name, "listed twice")
		listed[name] = l
		_, err := parseChaosFlags([]string{"--scenario", name}, new(bytes.Buffer), new(bytes.Buffer))
		require.NoError(t, err, "--scenario %s", name)
	}
	require.Equal(t, len(chaos.Builtin()), len(listed), "scenarios listed")
	for _, name := range []string{"no-faults", "semaphore-contention", "multi-key", "rw-contention"} {
		require.Contains(t, listed, name)
	}
	for _, s := range chaos.Builtin() {
		require.Contains(t, listed, s.Name)
	}
	inCatalogue := map[string]bool{}
	for _, s := range chaos.Catalogue() {
		inCatalogue[s.Name] = true
	}
	for name, l := range listed {
		assert.Equal(t, !inCatalogue[name], strings.HasSuffix(l, "(only with --scenario)"), l)
	}
}

// The read/write lock's scenarios are listed, as running only when named,
// and one runs as the catalogue's do: its row of the 80-column table with
// the expected verdict, the legend of the rw rows, its fenced resource and
// exit status 0. An unknown name is still refused.
func TestChaos_RWScenario(t *testing.T) {
	code, out, errOut := runCLI(t, "chaos", "--list")
	require.Equal(t, 0, code, errOut)
	for _, s := range chaos.RWScenarios() {
		assert.Regexp(t, `(?m)^`+s.Name+` +expect `+string(s.Expect)+` +.*\(only with --scenario\)$`, out)
	}

	code, out, errOut = runCLI(t, "chaos", "--scenario", "rw-contention", "--trials", "1", "--seed", "5", "--time-scale", testTimeScale)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	assert.Regexp(t, `(?m)^rw-contention +\d+ +0/1 +≤95% +0/0 +safe +safe$`, out)
	assert.Contains(t, out, "rw-...     a read/write lock's rows")
	assert.Contains(t, out, "fenced resource: fencing.RWRegister")
	assertFits(t, "stdout", out)
	assertFits(t, "stderr", errOut)
	assert.True(t, strings.HasSuffix(out, "1 of 1 as expected\n"), out)

	code, _, errOut = runCLI(t, "chaos", "--scenario", "rw-nothing")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, `unknown scenario "rw-nothing"`)
}

// --mutants runs the read/write lock's mutants with the lock's: the list it
// runs is every mutant of chaos.Mutants, the rw ones among them, and an rw
// mutant run alone (--mutant) is caught by its scenario. An unknown
// --mutant, or one without --mutants, is refused.
func TestChaos_MutantsIncludeTheRWLocks(t *testing.T) {
	var names []string
	for _, m := range pickMutants(nil) {
		names = append(names, m.Name)
	}
	assert.Len(t, names, len(chaos.Mutants()))
	require.NotEmpty(t, chaos.RWMutants())
	for _, m := range chaos.RWMutants() {
		assert.Contains(t, names, m.Name, "--mutants runs the read/write lock's mutants")
	}
	wantUsageError(t, `unknown mutant "rw-nothing"`, "chaos", "--mutants", "--mutant", "rw-nothing")
	wantUsageError(t, "add --mutants", "chaos", "--mutant", "rw-reader-ignores-writer")

	if !mutation.Available() {
		t.Skipf("running a mutant needs the mutant hooks: go test -tags %s", mutation.Tag)
	}
	code, out, errOut := runCLI(t, "chaos", "--mutants", "--mutant", "rw-writer-ignores-readers", "--seed", "5", "--time-scale", testTimeScale)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	assert.Regexp(t, `(?m)^rw-writer-ignores-readers +rw-contention +(unsafe|broken) +caught$`, out)
	assert.True(t, strings.HasSuffix(out, "1 of 1 mutants caught\n"), out)
	assertFits(t, "stdout", out)
}
