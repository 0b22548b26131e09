package timeline

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

	"github.com/d3b93e30/redlock/internal/oracle"
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
// The x axis is time since the trial's start (h.Start) in milliseconds, from
// 0 to h.End (at least 1 ms; events before 0 are clamped to the left edge).
// Each client in h.Clients gets a lane showing its believed-held intervals as
// solid bars labelled with the fencing token when it fits (hover titles carry
// the details), the part of an acted interval after validity as a hatched
// bar, writes as small marks (circle above the bar for the plain resource,
// diamond below it for the fenced one; green accepted, grey rejected, red
// ring when accepted and stale) and failed Acquire calls as
// orange crosses. Each node in h.Nodes gets a lane at the bottom with its
// fault bands, labelled with their description (overlapping bands are
// stacked). Mutual-exclusion violations are drawn in red over the overlapping
// span on both clients' lanes, notes as labelled dashed vertical lines, and a
// legend closes the picture.
//
// The document is built in memory and written with a single w.Write; WriteSVG
// returns that call's error, if any. h is not modified.
func WriteSVG(w io.Writer, title string, h oracle.History) error {
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

// svgRender writes the whole document for h to b: it lays the picture out,
// then draws it back to front, each layer over the ones before.
func svgRender(b *bytes.Buffer, title string, h *oracle.History) {
	l := svgLayOut(h)
	l.header(b, title, h)
	l.lanes(b, h)
	l.grid(b)
	l.faults(b, h)
	l.holds(b, h)
	l.violations(b, h) // over the bars but under the marks
	l.tokens(b, h)     // above the violation shading
	l.failures(b, h)
	l.writes(b, h)
	l.notes(b)
	l.legend(b)
	b.WriteString("</svg>\n")
}

// svgBand is a node's fault band and the row it is stacked in.
type svgBand struct {
	f   oracle.FaultRecord
	row int
}

// svgLayout is where everything goes: the time scale, the rows that keep
// labels apart, and the vertical position of every lane and axis.
type svgLayout struct {
	end time.Duration // the right edge (at least 1 ms)
	sc  svgScale

	notesSorted []oracle.NoteRecord // by time
	noteRows    []int               // label row of notesSorted[i]
	nodeBands   map[int][]svgBand
	nodeRows    map[int]int // rows of stacked bands in a node's lane

	y, summaryY, notesTop, topAxisY float64 // title, summary, note labels, top ticks
	lanesTop, nodesTop, lanesBottom float64
	axisY, axisTitleY, legendTop    float64 // bottom ticks, axis title, legend
	clientY, nodeY                  map[int]float64
	legendItems                     []svgLegendItem
	height                          float64
}

// svgLayOut places every part of the picture of h.
func svgLayOut(h *oracle.History) *svgLayout {
	l := &svgLayout{end: max(h.End, time.Millisecond)}
	l.sc = svgScale{t0: 0, t1: l.end, x0: svgLeft, x1: svgWidth - svgRight}
	nNoteRows := l.layOutNotes(h)
	l.layOutFaults(h)

	l.y = 30.0 // title baseline
	l.summaryY = l.y + 18
	l.notesTop = l.summaryY + 10
	l.topAxisY = l.notesTop + float64(nNoteRows)*svgNoteRow + 14 // tick label baseline
	l.lanesTop = l.topAxisY + 6
	l.clientY = map[int]float64{}
	cy := l.lanesTop
	for _, c := range h.Clients {
		l.clientY[c] = cy
		cy += svgClientLane
	}
	l.nodesTop = cy
	if len(h.Nodes) > 0 {
		l.nodesTop += 10
	}
	l.nodeY = map[int]float64{}
	ny := l.nodesTop
	for _, n := range h.Nodes {
		l.nodeY[n] = ny
		ny += float64(l.nodeRows[n])*svgNodeRow + 6
	}
	l.lanesBottom = ny
	l.axisY = l.lanesBottom + 16 // bottom tick labels baseline
	l.axisTitleY = l.axisY + 16
	l.legendTop = l.axisTitleY + 14

	l.legendItems = svgLegendItems()
	lrows := 1
	l.eachLegendItem(func(svgLegendItem, float64, float64) {}, func() { lrows++ })
	l.height = l.legendTop + float64(lrows)*svgLegendRow + 10
	return l
}

// layOutNotes gives each note a label row, chosen so labels do not collide,
// and returns how many rows there are.
func (l *svgLayout) layOutNotes(h *oracle.History) int {
	l.notesSorted = slices.Clone(h.Notes)
	slices.SortStableFunc(l.notesSorted, func(a, b oracle.NoteRecord) int { return cmp.Compare(a.At, b.At) })
	ns, ne := make([]float64, len(l.notesSorted)), make([]float64, len(l.notesSorted))
	for i, n := range l.notesSorted {
		ns[i] = l.sc.x(n.At)
		ne[i] = ns[i] + svgTextWidth(n.Text, 10) + 8
	}
	rows, n := svgAssignRows(ns, ne)
	l.noteRows = rows
	return n
}

// layOutFaults stacks each node's fault bands in rows, so that overlapping
// bands and their labels do not collide.
func (l *svgLayout) layOutFaults(h *oracle.History) {
	l.nodeBands, l.nodeRows = map[int][]svgBand{}, map[int]int{}
	for _, node := range h.Nodes {
		var fs []oracle.FaultRecord
		for _, f := range h.Faults {
			if f.Node == node {
				fs = append(fs, f)
			}
		}
		slices.SortStableFunc(fs, func(a, b oracle.FaultRecord) int { return cmp.Compare(a.From, b.From) })
		st, en := make([]float64, len(fs)), make([]float64, len(fs))
		for i, f := range fs {
			st[i] = l.sc.x(f.From)
			en[i] = max(l.sc.x(f.To), st[i]+2, st[i]+svgTextWidth(f.What+svgFaultSpan(f), 10)+8)
		}
		rows, n := svgAssignRows(st, en)
		for i, f := range fs {
			l.nodeBands[node] = append(l.nodeBands[node], svgBand{f, rows[i]})
		}
		l.nodeRows[node] = max(n, 1)
	}
}

// eachLegendItem walks the legend left to right, wrapping to a new row
// (newRow is called) when an item would pass the right margin, and calls
// item with each item's position.
func (l *svgLayout) eachLegendItem(item func(it svgLegendItem, x, y float64), newRow func()) {
	lx, ly := svgLeft, l.legendTop
	for _, it := range l.legendItems {
		wd := 26 + svgTextWidth(it.label, 11) + 18
		if lx+wd > svgWidth-svgRight && lx > svgLeft {
			lx, ly = svgLeft, ly+svgLegendRow
			newRow()
		}
		item(it, lx, ly)
		lx += wd
	}
}

// header writes the document's opening, its definitions, the background,
// the title and the summary line.
func (l *svgLayout) header(b *bytes.Buffer, title string, h *oracle.History) {
	fmt.Fprintf(b, `<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">
`, svgWidth, l.height, svgWidth, l.height)
	fmt.Fprintf(b, "<title>%s</title>\n", svgEsc(title))
	fmt.Fprintf(b, `<defs>
<pattern id="acted" patternUnits="userSpaceOnUse" width="6" height="6" patternTransform="rotate(45)">
<rect width="6" height="6" fill="#dbe7f3"/><line x1="0" y1="0" x2="0" y2="6" stroke="%s" stroke-width="2"/>
</pattern>
</defs>
`, svgColBar)
	fmt.Fprintf(b, `<rect x="0" y="0" width="%.0f" height="%.0f" fill="#ffffff"/>`+"\n", svgWidth, l.height)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="16" font-weight="bold" fill="%s">%s</text>`+"\n", svgLeft, l.y, svgColText, svgEsc(title))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="12" fill="%s">%s</text>`+"\n", svgLeft, l.summaryY, svgColText, svgEsc(svgSummary(h)))
}

// lanes writes the lane backgrounds and labels: clients, then nodes.
func (l *svgLayout) lanes(b *bytes.Buffer, h *oracle.History) {
	for i, c := range h.Clients {
		fill := "#ffffff"
		if i%2 == 0 {
			fill = "#f4f6f9"
		}
		ly := l.clientY[c]
		fmt.Fprintf(b, `<rect x="0" y="%.1f" width="%.0f" height="%.1f" fill="%s"/>`+"\n", ly, svgWidth, svgClientLane, fill)
		fmt.Fprintf(b, `<text class="lane-label" x="%.1f" y="%.1f" text-anchor="end" font-size="12" fill="%s">client %d</text>`+"\n",
			svgLeft-10, ly+svgClientLane/2+4, svgColText, c)
	}
	if len(h.Nodes) > 0 {
		fmt.Fprintf(b, `<line x1="0" y1="%.1f" x2="%.0f" y2="%.1f" stroke="#bbbbbb" stroke-width="1"/>`+"\n", l.nodesTop-5, svgWidth, l.nodesTop-5)
	}
	for i, n := range h.Nodes {
		fill := "#ffffff"
		if i%2 == 0 {
			fill = "#f7f5f0"
		}
		ly := l.nodeY[n]
		lh := float64(l.nodeRows[n])*svgNodeRow + 6
		fmt.Fprintf(b, `<rect x="0" y="%.1f" width="%.0f" height="%.1f" fill="%s"/>`+"\n", ly, svgWidth, lh, fill)
		fmt.Fprintf(b, `<text class="lane-label" x="%.1f" y="%.1f" text-anchor="end" font-size="12" fill="%s">node %d</text>`+"\n",
			svgLeft-10, ly+lh/2+4, svgColText, n)
	}
}

// grid writes the vertical grid lines, the tick labels above and below the
// lanes, and the axis title.
func (l *svgLayout) grid(b *bytes.Buffer) {
	sc := l.sc
	step := svgNiceStep(l.end)
	b.WriteString(`<g font-size="10" fill="#555555">` + "\n")
	for t := time.Duration(0); t <= l.end; t += step {
		x := sc.x(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`+"\n", x, l.lanesTop, x, l.lanesBottom, svgColGrid)
		lbl := svgFmtMS(t)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, l.topAxisY, lbl)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, l.axisY, lbl)
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#888888" stroke-width="1"/>`+"\n", sc.x0, l.lanesBottom, sc.x1, l.lanesBottom)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="11" fill="#555555">time since start (ms)</text>`+"\n", (sc.x0+sc.x1)/2, l.axisTitleY)
}

// faults writes each node's fault bands (an instantaneous fault is a thin
// mark) with their labels.
func (l *svgLayout) faults(b *bytes.Buffer, h *oracle.History) {
	for _, n := range h.Nodes {
		for _, bd := range l.nodeBands[n] {
			f := bd.f
			col := svgFaultColour(f.What)
			top := l.nodeY[n] + 3 + float64(bd.row)*svgNodeRow
			x0, x1 := l.sc.x(f.From), l.sc.x(f.To)
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
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s<tspan class="fault-span" fill="%s">%s</tspan></text></g>`+"\n",
				x0+4, top+10.5, svgColText, svgEsc(f.What), svgColNote, svgEsc(svgFaultSpan(f)))
		}
	}
}

// svgFaultSpan says when a fault happened, for its label: " at 0.54 ms" for
// an instantaneous fault, " from 87 ms" for one that lasted to the end of
// the trial, else " 0.005–0.54 ms". A fault of a fraction of a millisecond
// (the partition in the amnesia scenarios, cut at the start and healed once
// the first holder acquired) is a sliver on a picture a second wide: the
// label gives its duration.
func svgFaultSpan(f oracle.FaultRecord) string {
	switch {
	case f.To == f.From:
		return " at " + svgFmtMS(f.From) + " ms"
	case f.Open:
		return " from " + svgFmtMS(f.From) + " ms"
	}
	return " " + svgFmtMS(f.From) + "–" + svgFmtMS(f.To) + " ms"
}

// holds writes each hold's believed-held bar, and the hatched part it acted
// after its validity.
func (l *svgLayout) holds(b *bytes.Buffer, h *oracle.History) {
	for _, x := range h.Holds {
		ly, ok := l.clientY[x.Client]
		if !ok {
			continue
		}
		top := ly + 11
		x0 := l.sc.x(x.Acquired)
		x1 := l.sc.x(max(x.BelievedEnd, x.Acquired))
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
			xa := l.sc.x(x.ActedEnd)
			fmt.Fprintf(b, `<rect class="acted" x="%.1f" y="%.1f" width="%.1f" height="14" fill="url(#acted)" stroke="%s" stroke-width="0.8" stroke-dasharray="3,2"/>`,
				x1, top, max(xa-x1, 1.5), svgColBarStroke)
		}
		b.WriteString("</g>\n")
	}
}

// violations shades each mutual-exclusion violation's span across both
// clients' lanes.
func (l *svgLayout) violations(b *bytes.Buffer, h *oracle.History) {
	for _, v := range h.Violations {
		ya, oka := l.clientY[v.ClientA]
		yb, okb := l.clientY[v.ClientB]
		if !oka || !okb {
			continue
		}
		x0, x1 := l.sc.x(v.From), l.sc.x(v.To)
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
}

// tokens labels each hold's bar with its fencing token, where it fits.
func (l *svgLayout) tokens(b *bytes.Buffer, h *oracle.History) {
	for _, x := range h.Holds {
		ly, ok := l.clientY[x.Client]
		if !ok || x.Token == 0 {
			continue
		}
		x0, x1 := l.sc.x(x.Acquired), l.sc.x(max(x.BelievedEnd, x.Acquired))
		lbl := "#" + strconv.FormatUint(x.Token, 10)
		if svgTextWidth(lbl, 10)+6 <= x1-x0 {
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" font-weight="bold" fill="#ffffff">%s</text>`+"\n", x0+3, ly+21.5, svgEsc(lbl))
		}
	}
}

// failures marks each failed Acquire call with a cross.
func (l *svgLayout) failures(b *bytes.Buffer, h *oracle.History) {
	for _, f := range h.Failures {
		ly, ok := l.clientY[f.Client]
		if !ok {
			continue
		}
		x, yc := l.sc.x(f.At), ly+18
		tip := fmt.Sprintf("client %d: acquire failed at %s ms after %s ms, %d attempt(s): %s", f.Client, svgFmtMS(f.At), svgFmtMS(f.Latency), f.Attempts, f.Reason)
		fmt.Fprintf(b, `<g class="failed"><title>%s</title><path d="M%.1f,%.1f l6,6 m0,-6 l-6,6" stroke="%s" stroke-width="1.6" fill="none"/></g>`+"\n",
			svgEsc(tip), x-3, yc-3, svgColFailed)
	}
}

// writes marks each write: a diamond below the bar for the fenced resource,
// a circle above it for any other; green accepted, grey rejected, a red ring
// when stale.
func (l *svgLayout) writes(b *bytes.Buffer, h *oracle.History) {
	for _, w := range h.Writes {
		ly, ok := l.clientY[w.Client]
		if !ok {
			continue
		}
		x := l.sc.x(w.At)
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
		if w.Resource == oracle.ResourceFenced {
			yc := ly + 30
			fmt.Fprintf(b, `<g class="write"><title>%s</title><path d="M%.1f,%.1f l%.1f,%.1f l%.1f,%.1f l%.1f,%.1f z" fill="%s" stroke="%s" stroke-width="%.1f"/></g>`+"\n",
				svgEsc(tip), x, yc-r-1, r+1, r+1, -r-1, r+1, -r-1, -r-1, fill, stroke, sw)
		} else {
			yc := ly + 6
			fmt.Fprintf(b, `<g class="write"><title>%s</title><circle cx="%.1f" cy="%.1f" r="%.1f" fill="%s" stroke="%s" stroke-width="%.1f"/></g>`+"\n",
				svgEsc(tip), x, yc, r, fill, stroke, sw)
		}
	}
}

// notes draws each note as a dashed vertical line with its label in its row.
func (l *svgLayout) notes(b *bytes.Buffer) {
	for i, n := range l.notesSorted {
		x := l.sc.x(n.At)
		ty := l.notesTop + float64(l.noteRows[i]+1)*svgNoteRow - 3
		fmt.Fprintf(b, `<g class="note"><line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="1" stroke-dasharray="4,3"/>`,
			x, ty+2, x, l.lanesBottom, svgColNote)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="10" fill="%s">%s</text></g>`+"\n", x+3, ty, svgColNote, svgEsc(n.Text))
	}
}

// legend writes the legend's swatches and labels.
func (l *svgLayout) legend(b *bytes.Buffer) {
	l.eachLegendItem(func(it svgLegendItem, lx, ly float64) {
		fmt.Fprintf(b, `<g class="legend">%s<text x="%.1f" y="%.1f" font-size="11" fill="%s">%s</text></g>`+"\n",
			it.swatch(lx, ly), lx+24, ly+12, svgColText, svgEsc(it.label))
	}, func() {})
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
func svgSummary(h *oracle.History) string {
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
		len(h.Holds), len(h.Failures), len(h.Violations), v, stale[oracle.ResourcePlain], stale[oracle.ResourceFenced], svgDurMS(h.End))
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

// durMS converts d to float milliseconds.
func durMS(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
