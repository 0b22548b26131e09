package chaos

import (
	"io"

	"github.com/d3b93e30/redlock/internal/timeline"
)

// WriteSVG draws h as one timeline picture and writes it to w as a standalone
// SVG 1.1 document (no scripts, no external fonts or images), about 1200 px
// wide: a lane per client with its believed-held intervals (labelled with
// their fencing tokens) and its writes to both resources, a lane per node
// with its fault bands, mutual-exclusion violations in red, notes as dashed
// lines, and a legend. title is the heading (escaped; may be empty). The
// document is built in memory and written with a single w.Write; WriteSVG
// returns that call's error, if any.
func WriteSVG(w io.Writer, title string, h History) error {
	return timeline.WriteSVG(w, title, h.h)
}
