package chaos

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// WriteSoakSummary writes r as the summary table `redlock soak` prints:
// the run, the operations, each oracle's count (the defects must be 0),
// the faults, the resource bounds and the verdict. It returns the error of
// writing to w.
func WriteSoakSummary(w io.Writer, r SoakReport) error {
	var b bytes.Buffer
	o := r.Options
	fmt.Fprintf(&b, "redlock soak: %d clients over %d redlock clients × %d keys, %d redis-servers, %v (TTL %v, hold %v, seed %d)\n",
		o.Clients, o.Conns, o.Keys, o.Nodes, r.Elapsed.Truncate(time.Second), o.TTL, o.Hold, o.Seed)
	if o.Mutant != "" {
		fmt.Fprintf(&b, "mutant: %s\n", o.Mutant)
	}
	fmt.Fprintf(&b, "clocks: %s\n\n", r.Clocks)
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "operation\tacquired\tfailed\t")
	total := SoakOpStats{}
	for _, op := range soakOps {
		s, ok := r.Ops[op]
		if !ok {
			continue
		}
		total.Acquired += s.Acquired
		total.Failed += s.Failed
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", op, s.Acquired, s.Failed)
	}
	fmt.Fprintf(tw, "all\t%d\t%d\t\n", total.Acquired, total.Failed)
	if sec := r.Elapsed.Seconds(); sec > 0 {
		fmt.Fprintf(tw, "per second\t%.0f\t%.0f\t\n", float64(total.Acquired)/sec, float64(total.Failed)/sec)
	}
	tw.Flush()
	if len(r.FailureReasons) > 0 {
		reasons := slices.Sorted(maps.Keys(r.FailureReasons))
		slices.SortStableFunc(reasons, func(a, b string) int { return r.FailureReasons[b] - r.FailureReasons[a] })
		b.WriteString("failed because:")
		for _, k := range reasons {
			fmt.Fprintf(&b, " %s %d;", k, r.FailureReasons[k])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")

	tw = tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	c := r.Counts
	fmt.Fprintln(tw, "oracle\tcount\t")
	row := func(name string, n int, note string) { fmt.Fprintf(tw, "%s\t%d\t%s\n", name, n, note) }
	row("holds judged", c.Holds, "")
	row("overlapping believed holds", c.Overlaps, "defect if > 0")
	row("stale writes accepted (fenced)", c.StaleAccepted, "defect if > 0")
	row("tokens out of order", c.TokensOutOfOrder, "defect if > 0")
	row("keys left after TTL", r.NKeysLeft, fmt.Sprintf("defect if > 0 (bookkeeping kept by design: %d)", r.Bookkeeping))
	row("fenced writes / refused", c.FencedWrites, fmt.Sprintf("%d refused (paused clients' late writes)", c.FencedRefused))
	row("late-write overlaps", c.LateWriteOverlaps, "paused clients: expected, fencing refuses them")
	row("stale writes taken (plain)", c.StalePlain, "paused clients: what fencing prevents")
	if o.Unsafe {
		u := r.Unsafe
		row("unsafe faults: overlaps", u.Overlaps, "documented limit")
		row("unsafe faults: stale accepted (fenced)", u.StaleAccepted, "documented limit")
		row("unsafe faults: tokens out of order", u.TokensOutOfOrder, "documented limit")
	}
	tw.Flush()
	b.WriteString("\n")

	counts := map[string]int{}
	var names []string
	for _, f := range r.Faults {
		if counts[f.Name] == 0 {
			names = append(names, f.Name)
		}
		counts[f.Name]++
	}
	fmt.Fprintf(&b, "faults: %d", len(r.Faults))
	for i, n := range names {
		sep := ", "
		if i == 0 {
			sep = " ("
		}
		fmt.Fprintf(&b, "%s%s %d", sep, n, counts[n])
	}
	if len(names) > 0 {
		b.WriteString(")")
	}
	b.WriteString("\n")
	if n := len(r.Samples); n > 0 {
		first, last := r.Samples[0], r.Samples[n-1]
		maxG, maxH := 0, uint64(0)
		for _, s := range r.Samples {
			maxG, maxH = max(maxG, s.Goroutines), max(maxH, s.HeapBytes)
		}
		fmt.Fprintf(&b, "goroutines: %d before, %d at %v, %d at most, %d at %v, %d after close\n",
			r.GoroutinesBefore, first.Goroutines, first.T.Truncate(time.Second), maxG, last.Goroutines, last.T.Truncate(time.Second), r.GoroutinesAfter)
		fmt.Fprintf(&b, "heap (live, after GC): %.1f MB at %v, %.1f MB at most, %.1f MB at %v\n",
			mb(first.HeapBytes), first.T.Truncate(time.Second), mb(maxH), mb(last.HeapBytes), last.T.Truncate(time.Second))
	}
	fmt.Fprintf(&b, "connections per node: %d at most (bound %d)\n", r.MaxConns, r.ConnBound)
	var p50, p99 []time.Duration
	for _, p := range r.Series {
		if p.Acquired > 0 {
			p50, p99 = append(p50, p.P50), append(p99, p.P99)
		}
	}
	if len(p50) > 0 {
		fmt.Fprintf(&b, "acquire latency, median of the per-second figures: p50 %v, p99 %v\n",
			median(p50).Round(100*time.Microsecond), median(p99).Round(100*time.Microsecond))
	}
	for _, v := range c.First {
		fmt.Fprintf(&b, "DEFECT %v %s: %s\n", v.At.Round(time.Millisecond), v.Key, v.What)
	}
	for _, k := range r.KeysLeft {
		fmt.Fprintf(&b, "KEY LEFT %s\n", k)
	}
	for _, l := range r.Leaks {
		fmt.Fprintf(&b, "LEAK %s\n", l)
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "ERROR %s\n", e)
	}
	for _, e := range r.FaultErrors {
		fmt.Fprintf(&b, "FAULT NOT AS PLANNED (harness, not the lock) %s\n", e)
	}
	if r.OK() {
		b.WriteString("verdict: PASS\n")
	} else {
		b.WriteString("verdict: FAIL\n")
	}
	_, err := w.Write(b.Bytes())
	return err
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	slicesSort(s)
	return s[len(s)/2]
}

func slicesSort(s []time.Duration) { slices.Sort(s) }

// Layout of the soak plots, in SVG user units.
const (
	plotWidth   = 1000.0
	plotLeft    = 70.0
	plotRight   = 20.0
	plotPanel   = 130.0
	plotGap     = 40.0
	plotTop     = 60.0
	plotLegendH = 50.0
)

// plotSeries is one line of a panel.
type plotSeries struct {
	name   string
	colour string
	t      []time.Duration
	v      []float64
}

// plotPanelSpec is one panel: a title, a unit and its lines.
type plotPanelSpec struct {
	title string
	unit  string
	lines []plotSeries
}

// WriteSoakSVG draws r over time as one standalone SVG document (no
// scripts, no external resources): four panels on one time axis —
// acquisitions and failures per second, the p50 and p99 acquire latency
// of each second, the live heap, and the goroutines — with every fault of
// the schedule as a shaded band across them (red for the unsafe ones),
// named in the legend. It returns the error of writing to w.
func WriteSoakSVG(w io.Writer, r SoakReport) error {
	var acqT, smpT []time.Duration
	var acq, fail, p50, p99, heap, gor []float64
	for _, p := range r.Series {
		acqT = append(acqT, p.T)
		acq = append(acq, float64(p.Acquired))
		fail = append(fail, float64(p.Failed))
		p50 = append(p50, durMS(p.P50))
		p99 = append(p99, durMS(p.P99))
	}
	for _, s := range r.Samples {
		smpT = append(smpT, s.T)
		heap = append(heap, mb(s.HeapBytes))
		gor = append(gor, float64(s.Goroutines))
	}
	panels := []plotPanelSpec{
		{"acquisitions per second", "/s", []plotSeries{{"acquired", "#1f77b4", acqT, acq}, {"failed", "#999999", acqT, fail}}},
		{"acquire latency of each second", "ms", []plotSeries{{"p50", "#2ca02c", acqT, p50}, {"p99", "#ff7f0e", acqT, p99}}},
		{"live heap (after GC)", "MB", []plotSeries{{"heap", "#9467bd", smpT, heap}}},
		{"goroutines", "", []plotSeries{{"goroutines", "#8c564b", smpT, gor}}},
	}
	span := r.Elapsed
	for _, p := range r.Series {
		span = max(span, p.T)
	}
	if span <= 0 {
		span = time.Second
	}
	height := plotTop + float64(len(panels))*(plotPanel+plotGap) + plotLegendH
	inner := plotWidth - plotLeft - plotRight
	x := func(t time.Duration) float64 { return plotLeft + inner*float64(t)/float64(span) }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">
<rect width="100%%" height="100%%" fill="white"/>
`, plotWidth, height, plotWidth, height)
	o := r.Options
	title := fmt.Sprintf("redlock soak: %d clients × %d keys, %d redis-servers, %v, %d faults", o.Clients, o.Keys, o.Nodes, r.Elapsed.Truncate(time.Second), len(r.Faults))
	if o.Mutant != "" {
		title += ", mutant " + o.Mutant
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="22" font-size="15" font-weight="bold">%s</text>
`, plotLeft, svgText(title))
	verdict := fmt.Sprintf("overlaps %d, stale writes accepted %d, tokens out of order %d, keys left %d",
		r.Counts.Overlaps, r.Counts.StaleAccepted, r.Counts.TokensOutOfOrder, r.NKeysLeft)
	fmt.Fprintf(&b, `<text x="%.0f" y="40">%s</text>
`, plotLeft, svgText(verdict))

	bottom := plotTop + float64(len(panels))*(plotPanel+plotGap) - plotGap
	for _, f := range r.Faults {
		colour := "#f0ad4e"
		if f.Unsafe {
			colour = "#d62728"
		}
		x0, x1 := x(f.At), x(f.At+f.For)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.0f" width="%.1f" height="%.0f" fill="%s" fill-opacity="0.25"><title>%s</title></rect>
`, x0, plotTop, max(x1-x0, 1), bottom-plotTop, colour, svgText(fmt.Sprintf("%v %s %s", f.At.Truncate(time.Second), f.Name, f.Detail)))
	}
	for i, p := range panels {
		top := plotTop + float64(i)*(plotPanel+plotGap)
		plotOne(&b, p, top, x)
	}
	// Time axis under the last panel.
	step := niceStep(span)
	for t := time.Duration(0); t <= span; t += step {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%s</text>
`, x(t), bottom+14, t.String())
	}
	// Legend: the faults by name.
	names := map[string]bool{}
	lx := plotLeft
	ly := bottom + 36
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">faults (shaded):</text>
`, lx, ly)
	lx += 95
	for _, f := range r.Faults {
		if names[f.Name] {
			continue
		}
		names[f.Name] = true
		label := f.Name
		if f.Unsafe {
			label += " (unsafe)"
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%s</text>
`, lx, ly, svgText(label))
		lx += 7*float64(len(label)) + 14
		if lx > plotWidth-120 {
			lx, ly = plotLeft+95, ly+14
		}
	}
	b.WriteString("</svg>\n")
	_, err := w.Write(b.Bytes())
	return err
}

// plotOne draws one panel whose top is at top.
func plotOne(b *bytes.Buffer, p plotPanelSpec, top float64, x func(time.Duration) float64) {
	hi := 0.0
	for _, l := range p.lines {
		for _, v := range l.v {
			hi = max(hi, v)
		}
	}
	if hi <= 0 {
		hi = 1
	}
	hi *= 1.1
	y := func(v float64) float64 { return top + plotPanel - plotPanel*v/hi }
	right := plotWidth - plotRight
	fmt.Fprintf(b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#cccccc"/>
`, plotLeft, top, right-plotLeft, plotPanel)
	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>
`, plotLeft, top-6, svgText(p.title))
	for _, frac := range []float64{0, 0.5, 1} {
		v := hi / 1.1 * frac
		fmt.Fprintf(b, `<text x="%.0f" y="%.1f" text-anchor="end">%s%s</text>
`, plotLeft-6, y(v)+4, fmtNum(v), p.unit)
		fmt.Fprintf(b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#eeeeee"/>
`, plotLeft, right, y(v), y(v))
	}
	lx := right - 10
	for i := len(p.lines) - 1; i >= 0; i-- {
		l := p.lines[i]
		if len(l.v) > 0 {
			var pts strings.Builder
			for j, v := range l.v {
				fmt.Fprintf(&pts, "%.1f,%.1f ", x(l.t[j]), y(v))
			}
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="1.3" points="%s"/>
`, l.colour, strings.TrimSpace(pts.String()))
		}
		fmt.Fprintf(b, `<text x="%.0f" y="%.0f" text-anchor="end" fill="%s">%s</text>
`, lx, top-6, l.colour, svgText(l.name))
		lx -= 7*float64(len(l.name)) + 12
	}
}

func fmtNum(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

// niceStep returns a tick step that puts 5 to 12 ticks on span.
func niceStep(span time.Duration) time.Duration {
	for _, s := range []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute} {
		if span/s <= 12 {
			return s
		}
	}
	return 30 * time.Minute
}

// svgText escapes s for SVG text.
func svgText(s string) string {
	r := strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")
	return r.Replace(s)
}

func durMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
