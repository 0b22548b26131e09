package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/chaos"
)

// safetyDoc is the page whose verdict tables `redlock chaos --doc` writes.
const safetyDoc = "../../docs/safety.md"

// knownDeviations are the rows of docs/safety.md whose observed verdict
// differs from the expected one, each with where the page explains it. A row
// that differs and is not listed fails TestSafetyDoc_VerdictsAreTheCatalogues,
// and so does a listed one that no longer differs: the list is what the
// page shows, no more.
var knownDeviations = map[string]string{
	"inprocess/clock-back-amnesia": "redis-server with real clocks only (skipped elsewhere)",
}

// docProblems says where the verdict tables of doc differ from what the
// built-in scenarios expect: a scenario of the catalogue or a read/write
// lock's missing, one unknown, an expected verdict that is not the
// scenario's, an observed one that is not the expected one (unless listed
// in knownDeviations), a table that does not parse. Rows of the other
// built-in scenarios (semaphore, multi-key) may be there or not.
func docProblems(doc string) []string {
	var out []string
	expected := map[string]chaos.Verdict{}
	for _, s := range chaos.Builtin() {
		expected[s.Name] = s.Expect
	}
	required := map[string]bool{}
	for _, s := range append(chaos.Catalogue(), chaos.RWScenarios()...) {
		required[s.Name] = true
	}
	for _, backend := range []chaos.Backend{chaos.InProcess, chaos.RedisServer} {
		rows, err := verdictDocRows(doc, backend)
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", backend, err))
			continue
		}
		seen := map[string]bool{}
		for _, r := range rows {
			key := string(backend) + "/" + r.scenario
			seen[r.scenario] = true
			want, ok := expected[r.scenario]
			switch {
			case !ok:
				out = append(out, key+": not a built-in scenario")
				continue
			case r.expected != string(want):
				out = append(out, fmt.Sprintf("%s: the page expects %q, the catalogue %q", key, r.expected, want))
			}
			_, known := knownDeviations[key]
			switch {
			case r.observed != r.expected && !known:
				out = append(out, fmt.Sprintf("%s: observed %q, expected %q, and no explanation is listed", key, r.observed, r.expected))
			case r.observed == r.expected && known:
				out = append(out, key+": listed as a deviation, but the page shows the expected verdict")
			}
		}
		for name := range required {
			if !seen[name] {
				out = append(out, fmt.Sprintf("%s/%s: no row on the page", backend, name))
			}
		}
	}
	return out
}

// The verdict tables of docs/safety.md are the ones the scenarios expect:
// every scenario of the catalogue and of the read/write lock has a row on
// both backends, with its expected verdict, and was observed so (or is a
// listed, explained deviation). A
// changed expectation cannot leave a stale page: regenerate the tables with
// the commands the page gives (`redlock chaos ... --doc docs/safety.md`).
func TestSafetyDoc_VerdictsAreTheCatalogues(t *testing.T) {
	doc, err := os.ReadFile(safetyDoc)
	require.NoError(t, err)
	for _, p := range docProblems(string(doc)) {
		t.Error(p)
	}
	for key, where := range knownDeviations {
		assert.Contains(t, string(doc), where, "%s: the page explains the deviation", key)
	}
}

// The check catches a page that drifted: an expected verdict edited by hand,
// an observed one that differs, a row gone, markers gone.
func TestSafetyDoc_CheckCatchesDrift(t *testing.T) {
	b, err := os.ReadFile(safetyDoc)
	require.NoError(t, err)
	doc := string(b)
	require.Empty(t, docProblems(doc))
	for name, edit := range map[string]func(string) string{
		"an expected verdict changed": func(d string) string {
			return regexp.MustCompile(`(\| client-pause \|.*\| )unsafe( \| unsafe \|)`).ReplaceAllString(d, "${1}safe${2}")
		},
		"an observed verdict changed": func(d string) string {
			return regexp.MustCompile(`(\| majority-killed \|.*\| safe \| )safe( \|)`).ReplaceAllString(d, "${1}broken${2}")
		},
		"a row gone": func(d string) string {
			return regexp.MustCompile(`(?m)^\| no-faults \|.*\n`).ReplaceAllString(d, "")
		},
		"a read/write lock's row gone": func(d string) string {
			return regexp.MustCompile(`(?m)^\| rw-partition \|.*\n`).ReplaceAllString(d, "")
		},
		"an unknown row": func(d string) string {
			return regexp.MustCompile(`(?m)^\| rw-partition \|`).ReplaceAllString(d, "| rw-nothing |")
		},
		"the markers gone": func(d string) string { return strings.ReplaceAll(d, "<!-- verdicts:end redis-server -->", "") },
	} {
		drifted := edit(doc)
		require.NotEqual(t, doc, drifted, "%s: the edit changed nothing", name)
		assert.NotEmpty(t, docProblems(drifted), "%s: not noticed", name)
	}
}

// --doc rewrites exactly its backend's section, between the markers, with
// the command, the run's facts and a table the check reads back; it refuses
// a file without the markers.
func TestChaos_DocRewritesItsSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page.md")
	page := "# Page\n\nbefore\n<!-- verdicts:begin inprocess -->\nold table\n<!-- verdicts:end inprocess -->\nbetween\n" +
		"<!-- verdicts:begin redis-server -->\nkept\n<!-- verdicts:end redis-server -->\nafter\n"
	require.NoError(t, os.WriteFile(path, []byte(page), 0o644))
	code, out, errOut := runCLI(t, "chaos", "--scenario", "majority-killed", "--scenario", "client-pause", "--trials", "1",
		"--parallel", "2", "--time-scale", testTimeScale, "--doc", path)
	require.Equal(t, 0, code, "%s\n%s", out, errOut)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	got := string(b)
	assert.True(t, strings.HasPrefix(got, "# Page\n\nbefore\n<!-- verdicts:begin inprocess -->\n"), got)
	assert.Contains(t, got, "<!-- verdicts:end inprocess -->\nbetween\n<!-- verdicts:begin redis-server -->\nkept\n<!-- verdicts:end redis-server -->\nafter\n")
	assert.NotContains(t, got, "old table")
	assert.Contains(t, got, "    go run ./cmd/redlock chaos --scenario majority-killed --scenario client-pause --trials 1 --parallel 2")
	assert.Contains(t, got, "it exited 0")
	assert.Contains(t, got, time.Now().Format("2006-01"))
	rows, err := verdictDocRows(got, chaos.InProcess)
	require.NoError(t, err)
	require.Len(t, rows, 2)
	assert.Equal(t, verdictRow{scenario: "majority-killed", trials: "1", expected: "safe", observed: "safe"}, rows[0])
	assert.Equal(t, "client-pause", rows[1].scenario)

	// Before the run, not after it.
	require.NoError(t, os.WriteFile(path, []byte("no markers\n"), 0o644))
	code, out, errOut = runCLI(t, "chaos", "--scenario", "majority-killed", "--trials", "1", "--doc", path)
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, errOut, "<!-- verdicts:begin inprocess -->")
	assert.NotContains(t, errOut, "trial", "nothing ran")
	assert.Empty(t, out)
}

// --parallel and --doc are checked like the other flags.
func TestChaos_ParallelAndDocFlags(t *testing.T) {
	for _, args := range [][]string{{"--parallel", "0"}, {"--parallel", "33"}, {"--mutants", "--doc", "x.md"}} {
		code, _, errOut := runCLI(t, append([]string{"chaos"}, args...)...)
		assert.Equal(t, exitUsage, code, "%v", args)
		assert.NotEmpty(t, errOut)
	}
}

// The page's opening says how many scenarios a run without --scenario runs:
// the catalogue's size, as `redlock chaos --list` shows it.
func TestSafetyDoc_ScenarioCount(t *testing.T) {
	b, err := os.ReadFile(safetyDoc)
	require.NoError(t, err)
	m := regexp.MustCompile("`go run ./cmd/redlock chaos` runs (\\d+) failure scenarios").FindSubmatch(b)
	require.NotNil(t, m, "the opening names the number of scenarios")
	assert.Equal(t, fmt.Sprint(len(chaos.Catalogue())), string(m[1]),
		"docs/safety.md's opening: the number of scenarios a run without --scenario runs (redlock chaos --list)")
}
