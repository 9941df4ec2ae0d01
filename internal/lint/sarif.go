package lint

import (
	"encoding/json"
	"io"
	"net/url"
	"path/filepath"
)

// DocsURL is where each rule's page is published, followed by its ID and
// ".md"; SARIF links each rule there.
const DocsURL = "https://github.com/closingtime-dev/closingtime/blob/main/docs/lint/"

// The subset of SARIF 2.1.0 (OASIS, sarif-v2.1.0) that WriteSARIF writes.
type (
	sarifLog struct {
		Schema  string     `json:"$schema"`
		Version string     `json:"version"`
		Runs    []sarifRun `json:"runs"`
	}
	sarifRun struct {
		Tool        sarifTool         `json:"tool"`
		Invocations []sarifInvocation `json:"invocations"`
		Results     []sarifResult     `json:"results"`
	}
	sarifTool struct {
		Driver sarifDriver `json:"driver"`
	}
	sarifDriver struct {
		Name           string      `json:"name"`
		Version        string      `json:"version,omitempty"`
		InformationURI string      `json:"informationUri"`
		Rules          []sarifRule `json:"rules"`
	}
	sarifRule struct {
		ID                   string        `json:"id"`
		ShortDescription     sarifText     `json:"shortDescription"`
		FullDescription      sarifText     `json:"fullDescription"`
		Help                 sarifText     `json:"help"`
		HelpURI              string        `json:"helpUri"`
		DefaultConfiguration sarifRuleConf `json:"defaultConfiguration"`
	}
	sarifRuleConf struct {
		Level string `json:"level"`
	}
	sarifText struct {
		Text string `json:"text"`
	}
	sarifInvocation struct {
		ExecutionSuccessful bool                `json:"executionSuccessful"`
		Notifications       []sarifNotification `json:"toolExecutionNotifications"`
	}
	sarifNotification struct {
		Level     string          `json:"level"`
		Message   sarifText       `json:"message"`
		Locations []sarifLocation `json:"locations,omitempty"`
	}
	sarifResult struct {
		RuleID    string          `json:"ruleId"`
		RuleIndex int             `json:"ruleIndex"`
		Level     string          `json:"level"`
		Message   sarifText       `json:"message"`
		Locations []sarifLocation `json:"locations"`
	}
	sarifLocation struct {
		Physical sarifPhysical  `json:"physicalLocation"`
		Logical  []sarifLogical `json:"logicalLocations,omitempty"`
	}
	sarifPhysical struct {
		Artifact sarifArtifact `json:"artifactLocation"`
		Region   *sarifRegion  `json:"region,omitempty"`
	}
	sarifArtifact struct {
		URI string `json:"uri"`
	}
	sarifRegion struct {
		StartLine int `json:"startLine"`
	}
	sarifLogical struct {
		FullyQualifiedName string `json:"fullyQualifiedName"`
	}
)

var sarifLevel = [...]string{Info: "note", Warning: "warning", Error: "error"}

// WriteSARIF writes r as a SARIF 2.1.0 log for code-scanning tools: one run
// whose driver has r's version and lists the rules that ran, one result per finding at its
// file and line, and each unreadable input as an error notification of the
// invocation, which is then not successful.
func WriteSARIF(w io.Writer, r Report) error {
	run := sarifRun{
		Tool: sarifTool{Driver: sarifDriver{Name: "closingtime", Version: r.Version,
			InformationURI: "https://github.com/closingtime-dev/closingtime", Rules: []sarifRule{}}},
		Invocations: []sarifInvocation{{ExecutionSuccessful: len(r.Errors) == 0, Notifications: []sarifNotification{}}},
		Results:     []sarifResult{},
	}
	index := make(map[string]int, len(r.Rules))
	for i, rule := range r.Rules {
		index[rule.ID] = i
		run.Tool.Driver.Rules = append(run.Tool.Driver.Rules, sarifRule{
			ID:                   rule.ID,
			ShortDescription:     sarifText{rule.Title},
			FullDescription:      sarifText{rule.Why},
			Help:                 sarifText{rule.Fix},
			HelpURI:              DocsURL + rule.ID + ".md",
			DefaultConfiguration: sarifRuleConf{sarifLevel[rule.Severity]},
		})
	}
	for _, f := range r.Findings {
		run.Results = append(run.Results, sarifResult{
			RuleID:    f.Rule,
			RuleIndex: index[f.Rule],
			Level:     sarifLevel[f.Severity],
			Message:   sarifText{f.Object + ", " + f.Field + ": " + f.Message + ". Fix: " + f.Fix},
			Locations: []sarifLocation{{
				Physical: sarifPhysical{Artifact: sarifArtifact{fileURI(f.File)}, Region: &sarifRegion{f.Line}},
				Logical:  []sarifLogical{{f.Object + "/" + f.Field}},
			}},
		})
	}
	for _, err := range r.Errors {
		file, line, reason := inputError(err)
		n := sarifNotification{Level: "error", Message: sarifText{reason}}
		if file != "" {
			loc := sarifLocation{Physical: sarifPhysical{Artifact: sarifArtifact{fileURI(file)}}}
			if line > 0 {
				loc.Physical.Region = &sarifRegion{line}
			}
			n.Locations = []sarifLocation{loc}
		}
		run.Invocations[0].Notifications = append(run.Invocations[0].Notifications, n)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(sarifLog{
		Schema:  "https://json.schemastore.org/sarif-2.1.0.json",
		Version: "2.1.0",
		Runs:    []sarifRun{run},
	})
}

// fileURI turns a file name into a SARIF artifact URI: a relative path
// stays relative, with forward slashes and escapes; an absolute one becomes
// a file URI.
func fileURI(name string) string {
	u := url.URL{Path: filepath.ToSlash(name)}
	if filepath.IsAbs(name) {
		u.Scheme = "file"
	}
	return u.String()
}
