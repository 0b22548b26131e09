package etcdcompare

import (
	"strings"
	"testing"
	"time"

	"github.com/d3b93e30/redlock/chaos"
)

func TestWriteTable(t *testing.T) {
	rows := []Row{
		{
			Scenario: "client-pause",
			Redlock:  &chaos.Result{Trials: 3, Expect: chaos.Unsafe, Observed: chaos.Unsafe, Violations: 3, StalePlain: 3, P50: 1500 * time.Microsecond},
			Etcd: Result{Trials: 3, Expect: chaos.Unsafe, Observed: chaos.Unsafe, ExpectFenced: chaos.Safe, ObservedFenced: chaos.Safe,
				Violations: 3, StalePlain: 3, P50: 4 * time.Millisecond},
		},
		{Scenario: "holder-partitioned", Etcd: Result{Trials: 3, Expect: chaos.Unsafe, Observed: chaos.Safe, ExpectFenced: chaos.Safe, ObservedFenced: chaos.Safe}},
		{Scenario: "clock-jump", Redlock: &chaos.Result{Trials: 3, Expect: chaos.Unsafe, Observed: chaos.Unsafe}, Etcd: Result{Skipped: "not measured"}},
	}
	var text, md strings.Builder
	if err := WriteTable(&text, rows, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteTable(&md, rows, true); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1.5ms", "4.0ms", "3/0", "no equivalent", "safe (expected unsafe) << MISMATCH", "not applicable", "unsafe/safe"} {
		if !strings.Contains(text.String(), want) || !strings.Contains(md.String(), want) {
			t.Errorf("tables lack %q:\n%s\n%s", want, text.String(), md.String())
		}
	}
	lines := strings.Split(strings.TrimSpace(md.String()), "\n")
	if len(lines) != 2+len(rows) || !strings.HasPrefix(lines[1], "| --- |") {
		t.Errorf("markdown table: %d lines, want header, rule and %d rows:\n%s", len(lines), len(rows), md.String())
	}
}
