package etcdcompare

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/d3b93e30/redlock/internal/mdsection"
)

// The markers around the generated table in a Markdown file: `compare --doc
// FILE` rewrites what lies between them.
const (
	DocBegin = "<!-- compare:begin -->"
	DocEnd   = "<!-- compare:end -->"
)

// RunFacts are what the generated section says about the run besides its
// rows: the command line, how long it took, the machine's 1-minute load
// average at its start and end ("" where unknown) and its exit status.
type RunFacts = mdsection.Run

// CheckDoc returns the error UpdateDoc would return for the markers in the
// Markdown file path: compare --doc calls it before a run, so that a long
// run does not end on a file it cannot update.
func CheckDoc(path string) error { return mdsection.Check(path, DocBegin, DocEnd) }

// UpdateDoc rewrites the section between DocBegin and DocEnd, which must each
// appear once in the Markdown file path, with the run's command, what it ran
// on, how long it took, its exit status and the Markdown table of rows
// (WriteTable).
func UpdateDoc(path string, rows []Row, run RunFacts) error {
	var b bytes.Buffer
	b.WriteString(run.Preamble(""))
	if err := WriteTable(&b, rows, true); err != nil {
		return err
	}
	return mdsection.Rewrite(path, DocBegin, DocEnd, b.String())
}

// DocRow is one row of the generated table, as DocRows reads it back: the
// scenario and the verdict cells.
type DocRow struct {
	Scenario, Redlock, EtcdExpected, Etcd, EtcdFenced string
}

// DocRows returns the rows of the table between DocBegin and DocEnd in doc,
// or an error if the markers or the table are missing or malformed.
func DocRows(doc string) ([]DocRow, error) {
	header, cells, err := mdsection.Table(doc, DocBegin, DocEnd)
	if err != nil {
		return nil, err
	}
	if !slices.Equal(header, tableHeader) {
		return nil, fmt.Errorf("the table's header %q is not WriteTable's", strings.Join(header, " | "))
	}
	rows := make([]DocRow, 0, len(cells))
	for _, c := range cells {
		rows = append(rows, DocRow{Scenario: c[colScenario], Redlock: c[colRedlock], EtcdExpected: c[colEtcdExpected],
			Etcd: c[colEtcd], EtcdFenced: c[colEtcdFenced]})
	}
	return rows, nil
}
