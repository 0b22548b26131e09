package main

import (
	"strings"
	"testing"
)

// A line whose metrics are named "variant:unit" becomes one row per
// variant, in variantOrder, each with its own metrics and the line's plain
// ones but for the whole benchmark's totals; other lines stay as they are.
func TestParseExpandsVariantMetrics(t *testing.T) {
	in := "BenchmarkRoundTrips/5x2ms-2 1 8000 ns/op 8000 limit-nominal-us 12 ours:p50-us 10 limit:p50-us 60 ours:ops 60 limit:ops 99 B/op\n" +
		"BenchmarkC1Uncontended/ours-2 100 5 ns/op 3 p50-us\n"
	var meta strings.Builder
	rows, err := parse(strings.NewReader(in), &meta)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.name)
	}
	want := []string{"RoundTrips/5x2ms/limit", "RoundTrips/5x2ms/ours", "C1Uncontended/ours"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("rows %v, want %v", got, want)
	}
	ours := rows[1]
	if ours.n != 60 || ours.m["p50-us"] != 12 || ours.m["limit-nominal-us"] != 8000 {
		t.Errorf("ours row: runs %d, metrics %v", ours.n, ours.m)
	}
	for _, u := range []string{"ns/op", "B/op", "ops"} {
		if _, ok := ours.m[u]; ok {
			t.Errorf("ours row has the benchmark's %s", u)
		}
	}
	if rows[2].m["p50-us"] != 3 || rows[2].n != 100 {
		t.Errorf("plain row changed: %+v", rows[2])
	}
}
