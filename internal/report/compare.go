package report

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"slices"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
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
// run has no row of that side. A second table gives the causes of the
// scenarios' failed requests on each side (writeCauseComparison).
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
	if err := writeLines(w, "scenario\tcluster\t"+tableColumns, rows); err != nil {
		return err
	}
	return writeCauseComparison(w, names, sides, bySide)
}

// writeCauseComparison writes the causes of both sides side by side: for
// each scenario of names that had a failed or absorbed request on some
// side, a row per cause, in the order of the first side that gave it,
// with a column per side holding its requests summed over that side's
// runs (diagnosis.Sum), or "-" if the side did not run the scenario. The
// same scenario should give the same causes on every cluster.
func writeCauseComparison(w io.Writer, names []string, sides []Side, bySide []map[string]results.Result) error {
	header := "scenario\tcause\t"
	for _, side := range sides {
		header += side.Cluster + "\t"
	}
	var rows []tableLine
	for _, name := range names {
		sums := make([][]results.CauseCount, len(sides))
		var order []results.Cause
		for i := range sides {
			s, ok := bySide[i][name]
			if !ok {
				continue
			}
			sums[i] = diagnosis.Sum(s.Runs)
			for _, c := range sums[i] {
				if !slices.Contains(order, c.Cause) {
					order = append(order, c.Cause)
				}
			}
		}
		for _, cause := range order {
			cells := name + "\t" + string(cause) + "\t"
			for i := range sides {
				cell := "-"
				if _, ran := bySide[i][name]; ran {
					c := results.CauseCount{Cause: cause}
					if j := slices.IndexFunc(sums[i], func(c results.CauseCount) bool { return c.Cause == cause }); j >= 0 {
						c = sums[i][j]
					}
					cell = causeCount(c)
				}
				cells += cell + "\t"
			}
			rows = append(rows, tableLine{cells: cells})
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return err
	}
	return writeLines(w, header, rows)
}

// WriteComparisonJSON writes sides as an indented Comparison.
func WriteComparisonJSON(w io.Writer, sides []Side) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(Comparison{Sides: sides})
}
