package lint

import (
	"encoding/json"
	"io"
)

// jsonReport is the document WriteJSON writes; its field names are stable.
type jsonReport struct {
	Findings []Finding   `json:"findings"`
	Errors   []jsonError `json:"errors"`
}

type jsonError struct {
	File    string `json:"file,omitempty"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

// WriteJSON writes r as one JSON object: "findings", an array of [Finding],
// and "errors", an array of the inputs that could not be read, each with
// "file", "line" (when known) and "message". Both arrays are present, if
// empty.
func WriteJSON(w io.Writer, r Report) error {
	doc := jsonReport{Findings: r.Findings, Errors: []jsonError{}}
	if doc.Findings == nil {
		doc.Findings = []Finding{}
	}
	for _, err := range r.Errors {
		file, line, reason := inputError(err)
		doc.Errors = append(doc.Errors, jsonError{File: file, Line: line, Message: reason})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}
