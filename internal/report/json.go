package report

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// WriteJSON writes r as the indented JSON of docs/lab.md § results.json.
func WriteJSON(w io.Writer, r *scenario.Results) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// ReadJSON reads results written by WriteJSON.
func ReadJSON(rd io.Reader) (*scenario.Results, error) {
	var r scenario.Results
	if err := json.NewDecoder(rd).Decode(&r); err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	return &r, nil
}
