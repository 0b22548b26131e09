package timeline

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/d3b93e30/redlock/internal/oracle"
)

// svgSampleHistory is a small trial in the spirit of Kleppmann's GC pause:
// three clients, five nodes, TTL 200 ms. Client 0 pauses past its validity
// and writes after client 1 acquired; node faults of several kinds.
func svgSampleHistory() oracle.History {
	o := oracle.NewOracle()
	o.Declare(3, 5)
	at := func(ms int) time.Time { return o.Start().Add(time.Duration(ms) * time.Millisecond) }
	highest := uint64(0) // the fenced resource's highest token accepted
	write := func(h oracle.HoldID, tok uint64, ms int) {
		o.Wrote(h, oracle.ResourcePlain, tok, true, at(ms))
		fresh := tok >= highest
		highest = max(highest, tok)
		o.Wrote(h, oracle.ResourceFenced, tok, fresh, at(ms))
	}

	a := o.Acquired(0, 1, at(5), at(140), 4*time.Millisecond, 1)
	write(a, 1, 20)
	o.Note(at(30), "client 0 paused 300ms")
	o.Failed(1, at(12), 7*time.Millisecond, 3, "quorum not reached")
	o.Failed(2, at(60), 50*time.Millisecond, 5, "quorum not reached")
	o.Fault(3, "clock +300ms", at(100), time.Time{})
	b := o.Acquired(1, 2, at(150), at(340), 3*time.Millisecond, 2)
	write(b, 2, 170)
	o.Released(b, at(300))
	o.Note(at(330), "client 0 resumed")
	write(a, 1, 332) // stale: plain accepts, fenced rejects
	o.Released(a, at(335))
	c := o.Acquired(2, 3, at(345), at(535), 2*time.Millisecond, 1)
	write(c, 3, 360)
	o.Fault(4, "killed", at(250), at(420))
	o.Fault(4, "paused 50ms <&>", at(260), at(310))
	o.Fault(2, "amnesia", at(430), at(430))
	d := o.Acquired(0, 4, at(450), at(640), 2*time.Millisecond, 1) // amnesia: both believe
	write(d, 4, 460)
	write(c, 3, 480) // stale again
	o.Released(c, at(500))
	o.Released(d, at(560))
	o.Failed(1, at(600), 40*time.Millisecond, 4, "context deadline exceeded")
	return o.History()
}

// svgElem is one parsed element: its name, attributes and direct text.
type svgElem struct {
	name  string
	attrs map[string]string
	text  string
	// group is the class of the nearest enclosing <g>, if any.
	group string
}

// svgParse checks that doc is well-formed XML and returns its elements.
func svgParse(t *testing.T, doc []byte) []svgElem {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	var out []svgElem
	var stack []int // indexes into out
	var groups []string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "SVG must be well-formed XML")
		switch tk := tok.(type) {
		case xml.StartElement:
			e := svgElem{name: tk.Name.Local, attrs: map[string]string{}}
			for _, a := range tk.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			if len(groups) > 0 {
				e.group = groups[len(groups)-1]
			}
			if e.name == "g" {
				groups = append(groups, e.attrs["class"])
			}
			out = append(out, e)
			stack = append(stack, len(out)-1)
		case xml.EndElement:
			if out[stack[len(stack)-1]].name == "g" {
				groups = groups[:len(groups)-1]
			}
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				out[stack[len(stack)-1]].text += string(tk)
			}
		}
	}
	require.Empty(t, stack, "unclosed elements")
	return out
}

func TestSVGTimeline(t *testing.T) {
	h := svgSampleHistory()
	require.Len(t, h.Violations, 2, "a late write (client 0/1) and an amnesia overlap (client 2/0)")
	assert.False(t, h.Violations[0].Believed)
	assert.True(t, h.Violations[1].Believed)

	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, `GC pause <client 0> & "fencing"`, h))
	doc := buf.Bytes()
	elems := svgParse(t, doc)

	require.NotEmpty(t, elems)
	root := elems[0]
	assert.Equal(t, "svg", root.name)
	assert.Equal(t, "1.1", root.attrs["version"])
	assert.Equal(t, "1200", root.attrs["width"])

	var lanes []string
	var titles []string
	red := 0
	for _, e := range elems {
		if e.name == "text" && e.attrs["class"] == "lane-label" {
			lanes = append(lanes, e.text)
		}
		if e.name == "text" {
			titles = append(titles, e.text)
		}
		if e.group == "violation" && e.name == "rect" && e.attrs["fill"] == svgColViolation {
			red++
		}
		assert.NotEqual(t, "script", e.name)
		assert.NotEqual(t, "image", e.name)
	}
	assert.Equal(t, []string{"client 0", "client 1", "client 2", "node 0", "node 1", "node 2", "node 3", "node 4"}, lanes)
	assert.GreaterOrEqual(t, red, 2*len(h.Violations), "red marks on both lanes of each violation")
	assert.Contains(t, titles, `GC pause <client 0> & "fencing"`, "title survives escaping")
	assert.Contains(t, titles, "paused 50ms <&>")
	assert.Contains(t, titles, "client 0 paused 300ms")
	assert.Contains(t, titles, "#1", "token label on a wide enough bar")
	for _, want := range []string{"amnesia", "clock +300ms", "killed"} {
		assert.Contains(t, titles, want)
	}
	assert.Contains(t, titles, "time since start (ms)")
	assert.NotContains(t, string(doc), "<script")

	// For a human look: CHAOS_SVG_DIR=/some/dir keeps the picture.
	dir := os.Getenv("CHAOS_SVG_DIR")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, "oracle-sample.svg")
	require.NoError(t, os.WriteFile(path, doc, 0o644))
	t.Logf("sample timeline: %s", path)
}

func TestSVGEmptyAndDegenerate(t *testing.T) {
	for name, h := range map[string]oracle.History{
		"zero":  {},
		"empty": oracle.NewOracle().History(),
	} {
		var buf bytes.Buffer
		require.NoError(t, WriteSVG(&buf, "", h), name)
		elems := svgParse(t, buf.Bytes())
		assert.Equal(t, "svg", elems[0].name, name)
	}

	// Times before the start, a hold with no validity, a zero-length fault.
	o := oracle.NewOracle()
	o.Acquired(0, 0, o.Start().Add(-time.Second), o.Start().Add(-time.Second), 0, 1)
	o.Fault(0, "x", o.Start(), o.Start())
	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, "odd", o.History()))
	svgParse(t, buf.Bytes())
}

func TestSVGTicksStayReadable(t *testing.T) {
	for _, span := range []time.Duration{time.Millisecond, 7 * time.Millisecond, 999 * time.Millisecond, 12345 * time.Millisecond, time.Hour} {
		step := svgNiceStep(span)
		n := int(span / step)
		assert.True(t, n >= 4 && n <= 11, "span %v step %v gives %d ticks", span, step, n)
	}
	assert.Equal(t, "12.5", svgFmtMS(12500*time.Microsecond))
	assert.Equal(t, "0.001", svgFmtMS(time.Microsecond))
	assert.Equal(t, "1500", svgFmtMS(1500*time.Millisecond))
}

type svgFailWriter struct{}

func (svgFailWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSVGWriterError(t *testing.T) {
	err := WriteSVG(svgFailWriter{}, "t", svgSampleHistory())
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "disk full"))
}

// A fault much shorter than the trial, such as the amnesia scenarios'
// partition (cut at the start, healed once the first holder acquired,
// half a millisecond later), is a sliver on the picture: its label says
// when it began and ended, so the picture shows how long it lasted. So do
// instantaneous faults and faults that last to the end.
func TestSVGFaultLabelsGiveTheirSpan(t *testing.T) {
	o := oracle.NewOracle()
	o.Declare(1, 5)
	at := func(us int) time.Time { return o.Start().Add(time.Duration(us) * time.Microsecond) }
	o.Fault(3, "partitioned", at(5), at(540))
	o.Fault(0, "amnesia", at(542), at(542))
	o.Fault(4, "killed", at(87_000), time.Time{})
	h := o.Acquired(0, 1, at(535), at(988_000), 500*time.Microsecond, 1)
	o.Released(h, at(995_000))

	var buf bytes.Buffer
	require.NoError(t, WriteSVG(&buf, "amnesia", o.History()))
	var spans []string
	for _, e := range svgParse(t, buf.Bytes()) {
		if e.name == "tspan" && e.attrs["class"] == "fault-span" {
			assert.Equal(t, "fault", e.group)
			spans = append(spans, e.text)
		}
	}
	assert.ElementsMatch(t, []string{" 0.005–0.54 ms", " at 0.542 ms", " from 87 ms"}, spans)
}
