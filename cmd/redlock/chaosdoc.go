package main

import (
	"fmt"
	"strings"

	"github.com/d3b93e30/redlock/chaos"
	"github.com/d3b93e30/redlock/internal/mdsection"
)

// The markers around a generated verdict table in a Markdown file, one pair
// per backend: `redlock chaos --doc FILE` rewrites what lies between them.
const (
	verdictsBegin = "<!-- verdicts:begin %s -->"
	verdictsEnd   = "<!-- verdicts:end %s -->"
)

// verdictMarkers returns backend's begin and end markers.
func verdictMarkers(backend chaos.Backend) (begin, end string) {
	return fmt.Sprintf(verdictsBegin, backend), fmt.Sprintf(verdictsEnd, backend)
}

// verdictColumns are the generated table's columns; verdictDocRows reads
// the scenario, "expected" and "observed" back.
var verdictColumns = []string{"scenario", "trials", "not safe", "rate (95 %)", "locks", "overlaps",
	"stale plain/fenced", "token order", "p50", "p99", "expected", "observed"}

// updateVerdictDoc rewrites the verdict table of backend in the Markdown
// file path: everything between its begin and end markers, which must
// each appear once, becomes the command line of this run, what it ran on,
// how long it took, its exit status and the table of results.
func updateVerdictDoc(path string, results []chaos.Result, f chaosFlags, backend chaos.Backend, run mdsection.Run) error {
	begin, end := verdictMarkers(backend)
	return mdsection.Rewrite(path, begin, end, verdictTable(results, f, backend, run))
}

// checkVerdictDoc returns the error updateVerdictDoc would return for the
// markers of backend in path. runChaos calls it before a run, so that a
// long run does not end on a file it cannot update.
func checkVerdictDoc(path string, backend chaos.Backend) error {
	begin, end := verdictMarkers(backend)
	return mdsection.Check(path, begin, end)
}

// verdictTable is the generated part of a verdict section: the run (its
// command, machine, duration and exit status), one table row per scenario,
// and the notes that sum up a scenario (not those of single trials).
func verdictTable(results []chaos.Result, f chaosFlags, backend chaos.Backend, run mdsection.Run) string {
	var b strings.Builder
	run.Command = "go run ./cmd/redlock chaos " + strings.Join(f.args, " ")
	b.WriteString(run.Preamble(fmt.Sprintf(": %s, time scale %v", plural(f.nodes, string(backend)+" node"), f.timeScale)))
	b.WriteString("| " + strings.Join(verdictColumns, " | ") + " |\n")
	b.WriteString(strings.Repeat("| --- ", len(verdictColumns)) + "|\n")
	for _, r := range results {
		cells := []string{r.Scenario, "-", "-", "-", "-", "-", "-", "-", "-", "-", string(r.Expect), "skipped: " + r.Skipped}
		if r.Skipped == "" {
			observed := string(r.Observed)
			if r.Mismatch() {
				observed += " (differs)"
			}
			cells = []string{r.Scenario, fmt.Sprint(r.Trials), fmt.Sprintf("%d of %d", r.NotSafe(), r.Exercised()), rateBound(r),
				fmt.Sprint(r.Acquisitions), fmt.Sprint(r.Violations), fmt.Sprintf("%d/%d", r.StalePlain, r.StaleFenced),
				tokenOrder(r), fmtLatency(r.P50), fmtLatency(r.P99), string(r.Expect), observed}
		}
		b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
	}
	first := true
	for _, r := range results {
		for _, n := range r.Notes {
			if strings.HasPrefix(n, "trial ") {
				continue
			}
			if first {
				b.WriteString("\n")
				first = false
			}
			fmt.Fprintf(&b, "- %s: %s\n", r.Scenario, n)
		}
	}
	return b.String()
}

// verdictRow is one scenario's row of a generated verdict table.
type verdictRow struct{ scenario, trials, expected, observed string }

// verdictDocRows returns the rows of backend's verdict table in doc (the
// table between its markers), or an error if the markers or the table are
// missing or malformed.
func verdictDocRows(doc string, backend chaos.Backend) ([]verdictRow, error) {
	begin, end := verdictMarkers(backend)
	header, cells, err := mdsection.Table(doc, begin, end)
	if err != nil {
		return nil, err
	}
	col := map[string]int{}
	for i, c := range header {
		col[c] = i
	}
	for _, c := range []string{"scenario", "trials", "expected", "observed"} {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("the table's header %q has no %q column", strings.Join(header, " | "), c)
		}
	}
	rows := make([]verdictRow, 0, len(cells))
	for _, r := range cells {
		rows = append(rows, verdictRow{scenario: r[col["scenario"]], trials: r[col["trials"]], expected: r[col["expected"]], observed: r[col["observed"]]})
	}
	return rows, nil
}
