package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/closingtime-dev/closingtime/internal/results"
)

// Side is one cluster's results in a comparison: the same scenarios run
// on the embedded cluster and on a real one (`closingtime lab --compare`).
type Side struct {
	// Cluster names the cluster: "embedded", "cluster"…
	Cluster string           `json:"cluster"`
	Results *results.Results `json:"results"`
}

// Comparison is what `closingtime lab --compare -o json` writes: the
// results of each side, in the order given (docs/cluster.md § closingtime
// lab --compare).
type Comparison struct {
	Sides []Side `json:"sides"`
}

// WriteComparison writes the comparison table: for each scenario, in the
// order of the first side that ran it, a row per side with the columns
// of the comparison table (WriteTable), so that each figure of one
// cluster sits above the same figure of the other, and under them the
// scenario's description, if a side has one. A scenario a side did not
// run has no row of that side.
func WriteComparison(w io.Writer, sides []Side) error {
	var names []string
	bySide := make([]map[string]results.Result, len(sides))
	for i, side := range sides {
		bySide[i] = map[string]results.Result{}
		for _, s := range side.Results.Scenarios {
			if _, seen := bySide[i][s.Name]; seen {
				return fmt.Errorf("compare: scenario %s twice in the results of %s", s.Name, side.Cluster)
			}
			bySide[i][s.Name] = s
			if !slices.Contains(names, s.Name) {
				names = append(names, s.Name)
			}
		}
	}
	var rows []tableLine
	for _, name := range names {
		var description string
		for i, side := range sides {
			if s, ok := bySide[i][name]; ok {
				rows = append(rows, tableLine{cells: name + "\t" + side.Cluster + "\t" + textRow(s)})
				description = cmp.Or(description, s.Description)
			}
		}
		rows[len(rows)-1].note = description
	}
	return writeLines(w, "scenario\tcluster\t"+tableColumns, rows)
}

// WriteComparisonJSON writes sides as an indented Comparison.
func WriteComparisonJSON(w io.Writer, sides []Side) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Comparison{Sides: sides})
}
