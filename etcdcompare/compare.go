package etcdcompare

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/d3b93e30/redlock/chaos"
)

// Row is one line of the side-by-side table: a scenario run on Redlock
// (through the chaos harness) and on etcd. Redlock is nil for an etcd-only
// scenario; a side that was not applicable has Skipped set.
type Row struct {
	Scenario string
	Redlock  *chaos.Result
	Etcd     Result
}

// WriteTable prints rows as an aligned text table, or as a Markdown table
// when markdown is set. Each side shows "expected → observed" verdicts
// (mismatches flagged), violations, stale writes accepted by the plain and
// the fenced resource, and the median acquire latency.
func WriteTable(w io.Writer, rows []Row, markdown bool) error {
	header := append([]string(nil), tableHeader...)
	lines := [][]string{header}
	for _, r := range rows {
		line := make([]string, len(header))
		line[colScenario] = r.Scenario
		trials := 0
		if rl := r.Redlock; rl == nil {
			line[colRedlock] = "no equivalent"
		} else if rl.Skipped != "" {
			line[colRedlock] = "skipped"
		} else {
			trials = rl.Trials
			line[colRedlock] = verdictText(rl.Expect, rl.Observed)
			line[colRedlock+1] = notSafeCell(rl.NotSafe(), rl.Exercised(), rl.Expect)
			line[colRedlock+2] = fmt.Sprint(rl.Acquisitions)
			line[colRedlock+3] = fmt.Sprint(rl.Violations)
			line[colRedlock+4] = fmt.Sprintf("%d/%d", rl.StalePlain, rl.StaleFenced)
			line[colRedlock+5] = fmtLatency(rl.P50)
		}
		if e := r.Etcd; e.Skipped != "" {
			line[colEtcdExpected] = "not applicable"
		} else {
			trials = max(trials, e.Trials)
			line[colEtcdExpected] = fmt.Sprintf("%s/%s", e.Expect, e.ExpectFenced)
			line[colEtcd] = verdictText(e.Expect, e.Observed)
			line[colEtcd+1] = notSafeCell(e.UnsafeTrials, e.Trials, e.Expect)
			line[colEtcdFenced] = verdictText(e.ExpectFenced, e.ObservedFenced)
			line[colEtcdFenced+1] = fmt.Sprint(e.Acquisitions)
			line[colEtcdFenced+2] = fmt.Sprint(e.Violations)
			line[colEtcdFenced+3] = fmt.Sprintf("%d/%d", e.StalePlain, e.StaleFenced)
			line[colEtcdFenced+4] = fmtLatency(e.P50)
		}
		if trials > 0 {
			line[colTrials] = fmt.Sprint(trials)
		}
		for i := range line {
			if line[i] == "" {
				line[i] = "-"
			}
		}
		lines = append(lines, line)
	}
	if markdown {
		var b strings.Builder
		for i, l := range lines {
			b.WriteString("| " + strings.Join(l, " | ") + " |\n")
			if i == 0 {
				b.WriteString(strings.Repeat("| --- ", len(l)) + "|\n")
			}
		}
		_, err := io.WriteString(w, b.String())
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for i, l := range lines {
		if i == 0 {
			for j := range l {
				l[j] = strings.ToUpper(l[j])
			}
		}
		fmt.Fprintln(tw, strings.Join(l, "\t")+"\t")
	}
	return tw.Flush()
}

// The table's columns, and the positions DocRows reads back.
var tableHeader = []string{"scenario", "trials", "Redlock verdict", "Redlock not safe", "acq.", "viol.", "stale plain/fenced", "p50",
	"etcd expected (unfenced/fenced)", "etcd verdict (unfenced)", "etcd unsafe", "etcd fenced", "acq.", "viol.", "stale plain/fenced", "p50"}

const (
	colScenario     = 0
	colTrials       = 1
	colRedlock      = 2
	colEtcdExpected = 8
	colEtcd         = 9
	colEtcdFenced   = 11
)

// notSafeCell says in how many of n trials k were not safe, with the bound
// on that rate at 95 % confidence that the run shows (chaos.RateBounds): the
// upper one ("0 of 10, ≤26%") unless the scenario is expected unsafe, then
// the lower one.
func notSafeCell(k, n int, expect chaos.Verdict) string {
	if n == 0 {
		return "0 of 0"
	}
	lower, upper := chaos.RateBounds(k, n)
	if expect == chaos.Unsafe {
		return fmt.Sprintf("%d of %d, ≥%.0f%%", k, n, math.Floor(100*lower))
	}
	return fmt.Sprintf("%d of %d, ≤%.0f%%", k, n, math.Ceil(100*upper))
}

// verdictText says "safe", or "safe (expected unsafe) << MISMATCH".
func verdictText(expect, observed chaos.Verdict) string {
	if expect == observed || (expect == SometimesUnsafe && (observed == chaos.Safe || observed == chaos.Unsafe)) {
		return string(observed)
	}
	return fmt.Sprintf("%s (expected %s) << MISMATCH", observed, expect)
}

func fmtLatency(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}
