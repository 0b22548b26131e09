package etcdcompare

import (
	"fmt"
	"io"
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
	header := []string{"scenario", "trials", "Redlock verdict", "acq.", "viol.", "stale plain/fenced", "p50",
		"etcd expected (unfenced/fenced)", "etcd verdict (unfenced)", "etcd fenced", "acq.", "viol.", "stale plain/fenced", "p50"}
	lines := [][]string{header}
	for _, r := range rows {
		line := make([]string, len(header))
		line[0] = r.Scenario
		trials := 0
		if rl := r.Redlock; rl == nil {
			line[2] = "no equivalent"
		} else if rl.Skipped != "" {
			line[2] = "skipped"
		} else {
			trials = rl.Trials
			line[2] = verdictText(rl.Expect, rl.Observed)
			line[3] = fmt.Sprint(rl.Acquisitions)
			line[4] = fmt.Sprint(rl.Violations)
			line[5] = fmt.Sprintf("%d/%d", rl.StalePlain, rl.StaleFenced)
			line[6] = fmtLatency(rl.P50)
		}
		if e := r.Etcd; e.Skipped != "" {
			line[7] = "not applicable"
		} else {
			trials = max(trials, e.Trials)
			line[7] = fmt.Sprintf("%s/%s", e.Expect, e.ExpectFenced)
			line[8] = verdictText(e.Expect, e.Observed)
			if e.UnsafeTrials > 0 && e.UnsafeTrials < e.Trials {
				line[8] += fmt.Sprintf(" (%d of %d trials)", e.UnsafeTrials, e.Trials)
			}
			line[9] = verdictText(e.ExpectFenced, e.ObservedFenced)
			line[10] = fmt.Sprint(e.Acquisitions)
			line[11] = fmt.Sprint(e.Violations)
			line[12] = fmt.Sprintf("%d/%d", e.StalePlain, e.StaleFenced)
			line[13] = fmtLatency(e.P50)
		}
		if trials > 0 {
			line[1] = fmt.Sprint(trials)
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
