package etcdcompare

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/d3b93e30/redlock/chaos"
)

// knownDeviations are the verdict cells of the page's table that show a
// mismatch or a skipped scenario, keyed "scenario/side" (side "redlock",
// "etcd" or "etcd fenced"), each with the words of the page that explain
// it. A deviation not listed fails TestDocTableMatchesTheCatalogues, and so
// does a listed one the table no longer shows.
var knownDeviations = map[string]string{
	"clock-back-amnesia/redlock": "clock-back-amnesia needs real clocks",
}

// The table in docs/etcd-comparison.md is the one the catalogues expect:
// every scenario of Catalogue has a row, each row's expected etcd verdicts
// are the scenario's, its Redlock verdict is the chaos catalogue's expected
// one, and no verdict is marked as a mismatch unless the page explains it
// (knownDeviations). A changed expectation, or a run whose verdicts
// differed, cannot leave the page as it was: regenerate it with
// `go run ./cmd/compare --doc ../docs/etcd-comparison.md`.
func TestDocTableMatchesTheCatalogues(t *testing.T) {
	doc := readDoc(t)
	rows, err := DocRows(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range docProblems(rows) {
		t.Error(p)
	}
	for key, words := range knownDeviations {
		if !strings.Contains(doc, words) {
			t.Errorf("%s: the page does not explain the deviation (%q)", key, words)
		}
	}
}

func readDoc(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../docs/etcd-comparison.md")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// docProblems says where the rows differ from what the catalogues expect.
func docProblems(rows []DocRow) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Scenario] = true
		s, ok := Find(r.Scenario)
		if !ok {
			out = append(out, fmt.Sprintf("the page has a row for %q, which is not in the catalogue", r.Scenario))
			continue
		}
		for side, cell := range map[string]string{"redlock": r.Redlock, "etcd": r.Etcd, "etcd fenced": r.EtcdFenced} {
			_, known := knownDeviations[r.Scenario+"/"+side]
			switch mismatch := strings.Contains(cell, "MISMATCH") || cell == "skipped"; {
			case mismatch && !known:
				out = append(out, fmt.Sprintf("%s: the page shows a verdict that differs from the expected one, unexplained: %q", r.Scenario, cell))
			case !mismatch && known:
				out = append(out, fmt.Sprintf("%s/%s: listed as a deviation, but the page shows the expected verdict", r.Scenario, side))
			}
		}
		wantExpected := "not applicable"
		if s.NotApplicable == "" {
			wantExpected = string(s.Expect) + "/" + string(s.ExpectFenced)
		}
		if r.EtcdExpected != wantExpected {
			out = append(out, fmt.Sprintf("%s: the page expects %q of etcd, the catalogue %q", r.Scenario, r.EtcdExpected, wantExpected))
		}
		redlock := s.Redlock
		if s.Name == "uncontended" {
			redlock = "no-faults" // with one client
		}
		if redlock == "" {
			if r.Redlock != "no equivalent" {
				out = append(out, fmt.Sprintf("%s: Redlock has no equivalent, the page says %q", r.Scenario, r.Redlock))
			}
			continue
		}
		if rs, ok := chaos.Find(redlock); !ok {
			out = append(out, fmt.Sprintf("%s: no chaos scenario %q", r.Scenario, redlock))
		} else if got := r.Redlock; got != string(rs.Expect) && got != "skipped" && !strings.HasSuffix(got, "(expected "+string(rs.Expect)+") << MISMATCH") {
			out = append(out, fmt.Sprintf("%s: the page says Redlock was %q, the chaos catalogue expects %q", r.Scenario, r.Redlock, rs.Expect))
		}
	}
	for _, s := range Catalogue() {
		if !seen[s.Name] {
			out = append(out, fmt.Sprintf("the page's table has no row for %q", s.Name))
		}
	}
	return out
}

// The check fails on a page whose table drifted: a verdict edited by hand,
// an expectation that changed, a mismatch the run reported, a scenario it
// skipped, a missing row.
func TestDocTableCheckCatchesDrift(t *testing.T) {
	doc := readDoc(t)
	if rows, err := DocRows(doc); err != nil || len(docProblems(rows)) > 0 {
		t.Fatalf("the page itself does not pass the check: %v %v", err, docProblems(rows))
	}
	for name, edit := range map[string]func(string) string{
		"a Redlock verdict changed": func(d string) string {
			return regexp.MustCompile(`(\| client-pause \| \d+ \| )unsafe`).ReplaceAllString(d, "${1}safe")
		},
		"an etcd expectation changed": func(d string) string { return strings.Replace(d, "| unsafe/safe |", "| safe/safe |", 1) },
		"a mismatch": func(d string) string {
			return regexp.MustCompile(`(\| no-faults \| \d+ \| )safe`).ReplaceAllString(d, "${1}safe (expected unsafe) << MISMATCH")
		},
		"a scenario skipped": func(d string) string {
			return regexp.MustCompile(`(\| no-faults \| \d+ \| )safe`).ReplaceAllString(d, "${1}skipped")
		},
		"a row gone": func(d string) string {
			i := strings.Index(d, "| majority-killed |")
			j := strings.Index(d[i:], "\n")
			return d[:i] + d[i+j+1:]
		},
	} {
		drifted := edit(doc)
		if drifted == doc {
			t.Fatalf("%s: the edit changed nothing", name)
		}
		rows, err := DocRows(drifted)
		if err == nil && len(docProblems(rows)) == 0 {
			t.Errorf("%s: the check did not notice", name)
		}
	}
}

// UpdateDoc rewrites only the section between DocBegin and DocEnd, with the
// command, the run's facts and a table DocRows reads back; CheckDoc and
// UpdateDoc refuse a page without the markers and leave it as it was.
func TestUpdateDoc_RewritesItsSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "page.md")
	page := "# Page\n\nbefore\n" + DocBegin + "\nold table\n" + DocEnd + "\nafter\n"
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := CheckDoc(path); err != nil {
		t.Fatal(err)
	}
	rows := []Row{
		{Scenario: "no-faults", Redlock: &chaos.Result{Scenario: "no-faults", Trials: 2, Expect: chaos.Safe, Observed: chaos.Safe},
			Etcd: Result{Scenario: "no-faults", Trials: 2, Expect: chaos.Safe, ExpectFenced: chaos.Safe, Observed: chaos.Safe, ObservedFenced: chaos.Safe}},
		{Scenario: "etcd-only", Etcd: Result{Skipped: "not on etcd"}},
	}
	run := RunFacts{Command: "cd etcdcompare && go run ./cmd/compare --trials 2", Took: time.Minute, LoadStart: "1.0", LoadEnd: "2.0", Code: 1}
	if err := UpdateDoc(path, rows, run); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	for _, want := range []string{"# Page\n\nbefore\n" + DocBegin + "\n\n    cd etcdcompare && go run ./cmd/compare --trials 2\n\n",
		"(load average 1.0 at the start, 2.0 at the end); it took 1m0s, and it exited 1", DocEnd + "\nafter\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("the page lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "old table") {
		t.Errorf("the old table is still there:\n%s", got)
	}
	read, err := DocRows(got)
	if err != nil {
		t.Fatal(err)
	}
	want := []DocRow{{Scenario: "no-faults", Redlock: "safe", EtcdExpected: "safe/safe", Etcd: "safe", EtcdFenced: "safe"},
		{Scenario: "etcd-only", Redlock: "no equivalent", EtcdExpected: "not applicable", Etcd: "-", EtcdFenced: "-"}}
	if !slices.Equal(read, want) {
		t.Errorf("DocRows = %+v, want %+v", read, want)
	}

	if err := os.WriteFile(path, []byte("no markers\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{"CheckDoc": CheckDoc(path), "UpdateDoc": UpdateDoc(path, rows, run)} {
		if err == nil || !strings.Contains(err.Error(), DocBegin) {
			t.Errorf("%s on a page without markers: %v, want an error naming %q", name, err, DocBegin)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "no markers\n" {
		t.Errorf("the page without markers was changed: %q", b)
	}
}
