package chaos

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Layout of the timeline picture, in SVG user units (pixels at 100%).
const (
	svgWidth      = 1200.0
	svgLeft       = 100.0 // plot starts here; lane labels sit to the left
	svgRight      = 24.0
	svgClientLane = 36.0
	svgNodeRow    = 18.0
	svgNoteRow    = 13.0
	svgLegendRow  = 20.0
	svgCharW      = 6.0 // rough width of one 10-px sans-serif character
)

// Colours, as plain SVG paint values (no CSS).
const (
	svgColBar       = "#4a7fb5"
	svgColBarStroke = "#2b5a8a"
	svgColAccepted  = "#2ca02c"
	svgColRejected  = "#9a9a9a"
	svgColStale     = "#d62728"
	svgColFailed    = "#e6550d"
	svgColViolation = "#d62728"
	svgColNote      = "#555555"
	svgColGrid      = "#e4e4e4"
	svgColText      = "#222222"
)

// WriteSVG draws h as one timeline picture and writes it to w as a standalone
// SVG 1.1 document (UTF-8, no scripts, no external fonts or images), about
// 1200 px wide; its height grows with the number of lanes. title is the
// heading (escaped; may be empty).
//
// The x axis is time since Oracle.Start in milliseconds, from 0 to h.End (at
// least 1 ms; events before 0 are clamped to the left edge). Each client in
// h.Clients gets a lane showing its believed-held intervals as solid bars
// labelled with the fencing token when it fits (hover titles carry the
// details), the part of an acted interval after validity as a hatched bar,
// writes as small marks (circle above the bar for any resource but
// ResourceFenced, diamond below it for ResourceFenced; green accepted, grey
// rejected, red ring when accepted and stale) and failed Acquire calls as
// orange crosses. Each node in h.Nodes gets a lane at the bottom with its
// fault bands, labelled with their description (overlapping bands are
// stacked). Mutual-exclusion violations are drawn in red over the overlapping
// span on both clients' lanes, notes as labelled dashed vertical lines, and a
// legend closes the picture.
//
// The document is built in memory and written with a single w.Write; WriteSVG
// returns that call's error, if any. h is not modified.
func WriteSVG(w io.Writer, title string, h History) error {
	var b bytes.Buffer
	svgRender(&b, title, &h)
	_, err := w.Write(b.Bytes())
	return err
}

// svgScale maps offsets to x coordinates.
type svgScale struct {
	t0, t1 time.Duration
	x0, x1 float64
}

// x maps offset t to an x coordinate, clamped to the plot.
func (s svgScale) x(t time.Duration) float64 {
	f := float64(t-s.t0) / float64(s.t1-s.t0)
	f = min(max(f, 0), 1)
	return s.x0 + f*(s.x1-s.x0)
}

// svgAssignRows puts spans [start, end) (in x units) into the first row whose
// previous span ended before start, and returns the rows and how many there
// are. spans are visited in the order given.
func svgAssignRows(starts, ends []float64) ([]int, int) {
	var rowEnd []float64
	rows := make([]int, len(starts))
	for i := range starts {
		r := 0
		for r < len(rowEnd) && rowEnd[r] > starts[i]-2 {
			r++
		}
		if r == len(rowEnd) {
			rowEnd = append(rowEnd, 0)
		}
		rowEnd[r] = ends[i]
		rows[i] = r
	}
	return rows, len(rowEnd)
}

// svgTextWidth estimates the width of s drawn at font size px.
func svgTextWidth(s string, px float64) float64 {
	return float64(len([]rune(s))) * svgCharW * px / 10
}

// svgRender writes the whole document for h to b.
func svgRender(b *bytes.Buffer, title string, h *History) {
	end := max(h.End, time.Millisecond)
	sc := svgScale{t0: 0, t1: end, x0: svgLeft, x1: svgWidth - svgRight}

	// Notes: one label row each, chosen so labels do not collide.
	notes := slices.Clone(h.Notes)
	slices.SortStableFunc(notes, func(a, b NoteRecord) int { return cmp.Compare(a.At, b.At) })
	ns, ne := make([]float64, len(notes)), make([]float64, len(notes))
	for i, n := range notes {
		ns[i] = sc.x(n.At)
		ne[i] = ns[i] + svgTextWidth(n.Text, 10) + 8
	}
	noteRows, nNoteRows := svgAssignRows(ns, ne)

	// Faults per node.
	type band struct {
		f   FaultRecord
		row int
	}
	nodeBands := map[int][]band{}
	nodeRows := map[int]int{}
	for _, node := range h.Nodes {
		var fs []FaultRecord
		for _, f := range h.Faults {
			if f.Node == node {
				fs = append(fs, f)
			}
		}
		slices.SortStableFunc(fs, func(a, b FaultRecord) int { return cmp.Compare(a.From, b.From) })
		st, en := make([]float64, len(fs)), make([]float64, len(fs))
		for i, f := range fs {
			st[i] = sc.x(f.From)
			en[i] = max(sc.x(f.To), st[i]+2, st[i]+svgTextWidth(f.What, 10)+8)
		}
		rows, n := svgAssignRows(st, en)
		for i, f := range fs {
			nodeBands[node] = append(nodeBands[node], band{f, rows[i]})
		}
		nodeRows[node] = max(n, 1)
	}

	// Vertical layout.
	y := 30.0 // title baseline
	summaryY := y + 18
	notesTop := summaryY + 10
	topAxisY := notesTop + float64(nNoteRows)*svgNoteRow + 14 // tick label baseline
	lanesTop := topAxisY + 6
	clientY := map[int]float64{}
	cy := lanesTop
	for _, c := range h.Clients {
		clientY[c] = cy
		cy += svgClientLane
	}
	nodesTop := cy
	if len(h.Nodes) > 0 {
		nodesTop += 10
	}
	nodeY := map[int]float64{}
	ny := nodesTop
	for _, n := range h.Nodes {
		nodeY[n] = ny
		ny += float64(nodeRows[n])*svgNodeRow + 6
	}
	lanesBottom := ny
	axisY := lanesBottom + 16 // bottom tick labels baseline
	axisTitleY := axisY + 16
	legendTop := axisTitleY + 14

	legend := svgLegendItems()
	lx, lrows := svgLeft, 1
	for _, it := range legend {
		wd := 26 + svgTextWidth(it.label, 11) + 18
		if lx+wd > svgWidth-svgRight && lx > svgLeft {
			lx, lrows = svgLeft, lrows+1
		}
		lx += wd
	}
	height := legendTop + float64(lrows)*svgLegendRow + 10

	// Header and definitions.
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">
`, svgWidth, height, svgWidth, height)
	fmt.Fprintf(b, "<title>%s</title>\n", svgEsc(title))
	fmt.Fprintf(b, `<defs>
<pattern id="acted" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#dbe7f3"/><line x1="0" y1="0" x2="0" y2="6" stroke="%s" stroke-width="2"/>
</pattern>
</defs>
`, svgColBar)
	fmt.Fprintf(b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", svgWidth, height)

	// Title and summary.
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="16" font-weight="bold" fill="%s">%s</text>`+"\n", svgLeft, y, svgColText, svgEsc(title))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" fill="%s">%s</text>`+"\n", svgLeft, summaryY, svgColText, svgEsc(svgSummary(h)))

	// Lane backgrounds and labels.
	for i, c := range h.Clients {
		fill := "#ffffff"
		if i%2 == 0 {
			fill = "#f4f6f9"
		}
		ly := clientY[c]
		fmt.Fprintf(b, `<rect x="0" y="%.1f" width="%.0f" height="%.1f" fill="%s"/>`+"\n", ly, svgWidth, svgClientLane, fill)
		fmt.Fprintf(b, `<text class="lane-label" x="%.1f" y="%.1f" text-anchor="end" font-size="12" fill="%s">client %d</text>`+"\n",
			svgLeft-10, ly+svgClientLane/2+4, svgColText, c)
	}
	if len(h.Nodes) > 0 {
		fmt.Fprintf(b, `<line x1="0" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#bbbbbb" stroke-width="1"/>`+"\n", nodesTop-5, svgWidth, nodesTop-5)
	}
	for i, n := range h.Nodes {
		fill := "#ffffff"
		if i%2 == 0 {
			fill = "#f7f5f0"
		}
		ly := nodeY[n]
		lh := float64(nodeRows[n])*svgNodeRow + 6
		fmt.Fprintf(b, `<rect x="0" y="%.1f" width="%.0f" height="%.1f" fill="%s"/>`+"\n", ly, svgWidth, lh, fill)
		fmt.Fprintf(b, `<text class="lane-label" x="%.1f" y="%.1f" text-anchor="end" font-size="12" fill="%s">node %d</text>`+"\n",
			svgLeft-10, ly+lh/2+4, svgColText, n)
	}

	// Grid and axes.
	step := svgNiceStep(end)
	b.WriteString(`<g font-size="10" fill="#555555">` + "\n")
	for t := time.Duration(0); t <= end; t += step {
		x := sc.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", x, lanesTop, x, lanesBottom, svgColGrid)
		lbl := svgFmtMS(t)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, topAxisY, lbl)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, axisY, lbl)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888888" stroke-width="1"/>`+"\n", sc.x0, lanesBottom, sc.x1, lanesBottom)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#555555">time since start (ms)</text>`+"\n", (sc.x0+sc.x1)/2, axisTitleY)

	// Fault bands.
	for _, n := range h.Nodes {
		for _, bd := range nodeBands[n] {
			f := bd.f
			col := svgFaultColour(f.What)
			top := nodeY[n] + 3 + float64(bd.row)*svgNodeRow
			x0, x1 := sc.x(f.From), sc.x(f.To)
			tip := fmt.Sprintf("node %d: %s, %s–%s ms", n, f.What, svgFmtMS(f.From), svgFmtMS(f.To))
			if f.Open {
				tip += " (until the end)"
			}
			if f.To == f.From {
				fmt.Fprintf(b, `<g class="fault"><title>%s</title><rect x="%.1f" y="%.1f" width="2.5" height="%.1f" fill="%s"/>`,
					svgEsc(tip), x0-1, top, svgNodeRow-4, col)
			} else {
				fmt.Fprintf(b, `<g class="fault"><title>%s</title><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.35" stroke="%s" stroke-width="1"/>`,
					svgEsc(tip), x0, top, max(x1-x0, 2), svgNodeRow-4, col, col)
			}
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text></g>`+"\n", x0+4, top+10.5, svgColText, svgEsc(f.What))
		}
	}

	// Holds.
	for _, x := range h.Holds {
		ly, ok := clientY[x.Client]
		if !ok {
			continue
		}
		top := ly + 11
		x0 := sc.x(x.Acquired)
		x1 := sc.x(max(x.BelievedEnd, x.Acquired))
		tip := fmt.Sprintf("client %d hold %d token %d: acquired %s ms, valid until %s ms", x.Client, x.ID, x.Token, svgFmtMS(x.Acquired), svgFmtMS(x.ValidUntil))
		if x.HasRelease {
			tip += fmt.Sprintf(", released %s ms", svgFmtMS(x.Released))
		}
		if x.ActedEnd > x.BelievedEnd {
			tip += fmt.Sprintf(", last write %s ms (after validity)", svgFmtMS(x.ActedEnd))
		}
		tip += fmt.Sprintf("; acquire took %s ms in %d attempt(s)", svgFmtMS(x.Latency), x.Attempts)
		fmt.Fprintf(b, `<g class="hold"><title>%s</title>`, svgEsc(tip))
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="14" fill="%s" stroke="%s" stroke-width="0.8"/>`,
			x0, top, max(x1-x0, 1.5), svgColBar, svgColBarStroke)
		if x.ActedEnd > x.BelievedEnd {
			xa := sc.x(x.ActedEnd)
			fmt.Fprintf(b, `<rect class="acted" x="%.1f" y="%.1f" width="%.1f" height="14" fill="url(#acted)" stroke="%s" stroke-width="0.8" stroke-dasharray="3,2"/>`,
				x1, top, max(xa-x1, 1.5), svgColBarStroke)
		}
		b.WriteString("</g>\n")
	}

	// Violations, over the bars but under the marks.
	for _, v := range h.Violations {
		ya, oka := clientY[v.ClientA]
		yb, okb := clientY[v.ClientB]
		if !oka || !okb {
			continue
		}
		x0, x1 := sc.x(v.From), sc.x(v.To)
		wd := max(x1-x0, 2)
		kind := "acted intervals overlap (late write after validity)"
		if v.Believed {
			kind = "both believed they held the lock"
		}
		tip := fmt.Sprintf("VIOLATION: client %d (hold %d) and client %d (hold %d), %s–%s ms: %s",
			v.ClientA, v.HoldA, v.ClientB, v.HoldB, svgFmtMS(v.From), svgFmtMS(v.To), kind)
		top, bot := min(ya, yb), max(ya, yb)+svgClientLane
		fmt.Fprintf(b, `<g class="violation"><title>%s</title>`, svgEsc(tip))
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.10"/>`, x0, top, wd, bot-top, svgColViolation)
		for _, ly := range []float64{ya, yb} {
			fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="0.35" stroke="%s" stroke-width="1.5"/>`,
				x0, ly+2, wd, svgClientLane-4, svgColViolation, svgColViolation)
		}
		b.WriteString("</g>\n")
	}

	// Token labels, above the violation shading.
	for _, x := range h.Holds {
		ly, ok := clientY[x.Client]
		if !ok || x.Token == 0 {
			continue
		}
		x0, x1 := sc.x(x.Acquired), sc.x(max(x.BelievedEnd, x.Acquired))
		lbl := "#" + strconv.FormatUint(x.Token, 10)
		if svgTextWidth(lbl, 10)+6 <= x1-x0 {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" font-weight="bold" fill="#ffffff">%s</text>`+"\n", x0+3, ly+21.5, svgEsc(lbl))
		}
	}

	// Failed acquires.
	for _, f := range h.Failures {
		ly, ok := clientY[f.Client]
		if !ok {
			continue
		}
		x, yc := sc.x(f.At), ly+18
		tip := fmt.Sprintf("client %d: acquire failed at %s ms after %s ms, %d attempt(s): %s", f.Client, svgFmtMS(f.At), svgFmtMS(f.Latency), f.Attempts, f.Reason)
		fmt.Fprintf(b, `<g class="failed"><title>%s</title><path d="M%.1f,%.1f l6,6 m0,-6 l-6,6" stroke="%s" stroke-width="1.6" fill="none"/></g>`+"\n",
			svgEsc(tip), x-3, yc-3, svgColFailed)
	}

	// Writes.
	for _, w := range h.Writes {
		ly, ok := clientY[w.Client]
		if !ok {
			continue
		}
		x := sc.x(w.At)
		fill := svgColAccepted
		if !w.Accepted {
			fill = svgColRejected
		}
		stroke, sw, r := "#ffffff", 0.8, 3.5
		if w.Stale {
			stroke, sw, r = svgColStale, 2.0, 4.5
		}
		verdict := "accepted"
		if !w.Accepted {
			verdict = "rejected"
		}
		if w.Stale {
			verdict = "accepted, STALE"
		}
		tip := fmt.Sprintf("client %d hold %d wrote %s with token %d at %s ms: %s", w.Client, w.Hold, w.Resource, w.Token, svgFmtMS(w.At), verdict)
		if w.Resource == ResourceFenced {
			yc := ly + 30
			fmt.Fprintf(b, `<g class="write"><title>%s</title><path d="M%.1f,%.1f l%.1f,%.1f l%.1f,%.1f l%.1f,%.1f z" fill="%s" stroke="%s" stroke-width="%.1f"/></g>`+"\n",
				svgEsc(tip), x, yc-r-1, r+1, r+1, -r-1, r+1, -r-1, -r-1, fill, stroke, sw)
		} else {
			yc := ly + 6
			fmt.Fprintf(b, `<g class="write"><title>%s</title><circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="%s" stroke-width="%.1f"/></g>`+"\n",
				svgEsc(tip), x, yc, r, fill, stroke, sw)
		}
	}

	// Notes.
	for i, n := range notes {
		x := sc.x(n.At)
		ty := notesTop + float64(noteRows[i]+1)*svgNoteRow - 3
		fmt.Fprintf(b, `<g class="note"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1" stroke-dasharray="4,3"/>`,
			x, ty+2, x, lanesBottom, svgColNote)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text></g>`+"\n", x+3, ty, svgColNote, svgEsc(n.Text))
	}

	// Legend.
	lx, ly := svgLeft, legendTop
	for _, it := range legend {
		wd := 26 + svgTextWidth(it.label, 11) + 18
		if lx+wd > svgWidth-svgRight && lx > svgLeft {
			lx, ly = svgLeft, ly+svgLegendRow
		}
		fmt.Fprintf(b, `<g class="legend">%s<text x="%.1f" y="%.1f" font-size="11" fill="%s">%s</text></g>`+"\n",
			it.swatch(lx, ly), lx+24, ly+12, svgColText, svgEsc(it.label))
		lx += wd
	}
	b.WriteString("</svg>\n")
}

// svgLegendItem is one swatch and its label.
type svgLegendItem struct {
	label  string
	swatch func(x, y float64) string
}

// svgLegendItems lists the legend in drawing order.
func svgLegendItems() []svgLegendItem {
	circle := func(fill, stroke string, sw float64) func(x, y float64) string {
		return func(x, y float64) string {
			return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s" stroke="%s" stroke-width="%.1f"/>`, x+9, y+8, fill, stroke, sw)
		}
	}
	diamond := func(fill string) func(x, y float64) string {
		return func(x, y float64) string {
			return fmt.Sprintf(`<path d="M%.1f,%.1f l4.5,4.5 l-4.5,4.5 l-4.5,-4.5 z" fill="%s" stroke="#ffffff" stroke-width="0.8"/>`, x+9, y+3.5, fill)
		}
	}
	return []svgLegendItem{
		{"believed held (#token)", func(x, y float64) string {
			return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="18" height="12" fill="%s" stroke="%s" stroke-width="0.8"/>`, x, y+2, svgColBar, svgColBarStroke)
		}},
		{"acted after validity (late write)", func(x, y float64) string {
			return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="18" height="12" fill="url(#acted)" stroke="%s" stroke-width="0.8" stroke-dasharray="3,2"/>`, x, y+2, svgColBarStroke)
		}},
		{"plain write accepted", circle(svgColAccepted, "#ffffff", 0.8)},
		{"plain write rejected", circle(svgColRejected, "#ffffff", 0.8)},
		{"fenced write accepted", diamond(svgColAccepted)},
		{"fenced write rejected", diamond(svgColRejected)},
		{"stale write accepted", func(x, y float64) string {
			return fmt.Sprintf(`<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s" stroke="%s" stroke-width="2"/>`, x+9, y+8, svgColAccepted, svgColStale)
		}},
		{"failed acquire", func(x, y float64) string {
			return fmt.Sprintf(`<path d="M%.1f,%.1f l6,6 m0,-6 l-6,6" stroke="%s" stroke-width="1.6" fill="none"/>`, x+6, y+5, svgColFailed)
		}},
		{"mutual-exclusion violation", func(x, y float64) string {
			return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="18" height="12" fill="%s" fill-opacity="0.35" stroke="%s" stroke-width="1.5"/>`, x, y+2, svgColViolation, svgColViolation)
		}},
		{"node fault", func(x, y float64) string {
			return fmt.Sprintf(`<rect x="%.1f" y="%.1f" width="18" height="12" fill="%s" fill-opacity="0.35" stroke="%s" stroke-width="1"/>`, x, y+2, "#636363", "#636363")
		}},
		{"note", func(x, y float64) string {
			return fmt.Sprintf(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1" stroke-dasharray="4,3"/>`, x+9, y, x+9, y+16, svgColNote)
		}},
	}
}

// svgSummary states the counts a reader looks for first.
func svgSummary(h *History) string {
	stale := map[string]int{}
	for _, w := range h.Writes {
		if w.Stale {
			stale[w.Resource]++
		}
	}
	v := "violations"
	if len(h.Violations) == 1 {
		v = "violation"
	}
	return fmt.Sprintf("%d acquisitions · %d failed acquires · %d mutual-exclusion %s · stale writes accepted: plain %d, fenced %d · %s",
		len(h.Holds), len(h.Failures), len(h.Violations), v, stale[ResourcePlain], stale[ResourceFenced], svgDurMS(h.End))
}

// svgFaultColour picks a colour from the fault's description.
func svgFaultColour(what string) string {
	w := strings.ToLower(what)
	switch {
	case strings.Contains(w, "amnesia") || strings.Contains(w, "restart"):
		return "#9467bd"
	case strings.Contains(w, "kill") || strings.Contains(w, "down"):
		return "#444444"
	case strings.Contains(w, "clock"):
		return "#ff7f0e"
	case strings.Contains(w, "pause") || strings.Contains(w, "hold") || strings.Contains(w, "stop"):
		return "#8c564b"
	case strings.Contains(w, "delay") || strings.Contains(w, "slow"):
		return "#bcbd22"
	case strings.Contains(w, "drop") || strings.Contains(w, "partition"):
		return "#17becf"
	default:
		return "#7f7f7f"
	}
}

// svgNiceStep returns a tick step of 1, 2 or 5 × 10^k ms (or µs) giving about
// ten ticks over span.
func svgNiceStep(span time.Duration) time.Duration {
	raw := float64(span) / 10
	if raw <= 0 {
		return time.Millisecond
	}
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return max(time.Duration(m*mag), time.Microsecond)
		}
	}
	return time.Duration(10 * mag)
}

// svgFmtMS formats d in milliseconds with up to three decimals.
func svgFmtMS(d time.Duration) string {
	return strconv.FormatFloat(math.Round(durMS(d)*1000)/1000, 'f', -1, 64)
}

// svgEsc escapes s for XML text and attribute values.
func svgEsc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s)) // a strings.Builder never fails
	return sb.String()
}

// svgDurMS formats a span for the summary line: whole milliseconds above one
// second, otherwise with up to three decimals.
func svgDurMS(d time.Duration) string {
	if d >= time.Second {
		return strconv.FormatFloat(durMS(d), 'f', 0, 64) + " ms"
	}
	return svgFmtMS(d) + " ms"
}
