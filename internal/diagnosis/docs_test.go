package diagnosis_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/closingtime-dev/closingtime/internal/diagnosis"
	"github.com/closingtime-dev/closingtime/internal/lint"
	"github.com/closingtime-dev/closingtime/internal/results"
	"github.com/closingtime-dev/closingtime/internal/scenario"
)

// root is the repository's root, from this package's directory.
const root = "../.."

// causesSection is the heading of the section of docs/diagnosis.md whose
// level-3 headings are the causes.
const causesSection = "Causes"

// heading is a Markdown heading of a page.
type heading struct {
	level int
	text  string
	// body is the text from the heading to the next one of its level or
	// above.
	body string
}

// headings returns the headings of page, in order, leaving out the
// lines of fenced code blocks.
func headings(page string) []heading {
	lines := strings.Split(page, "\n")
	var out []heading
	var at []int // the line of each heading
	fenced := false
	for i, line := range lines {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		level := len(line) - len(strings.TrimLeft(line, "#"))
		if fenced || level == 0 || !strings.HasPrefix(line[level:], " ") {
			continue
		}
		out = append(out, heading{level: level, text: strings.TrimSpace(line[level:])})
		at = append(at, i)
	}
	for i := range out {
		end := len(lines)
		for j := i + 1; j < len(out); j++ {
			if out[j].level <= out[i].level {
				end = at[j]
				break
			}
		}
		out[i].body = strings.Join(lines[at[i]:end], "\n")
	}
	return out
}

// anchor returns the anchor GitHub gives a heading's text: lower case,
// spaces as hyphens, and every other character but letters, digits,
// hyphens and underscores left out.
func anchor(text string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// diagnosisPage reads the page that DocsLink points into.
func diagnosisPage(t *testing.T) string {
	t.Helper()
	file, _, ok := strings.Cut(diagnosis.DocsLink(diagnosis.Unknown), "#")
	if !ok {
		t.Fatalf("DocsLink(%s) = %q: want FILE#ANCHOR", diagnosis.Unknown, diagnosis.DocsLink(diagnosis.Unknown))
	}
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// causeSections returns the level-3 headings of the page's causes
// section, in order.
func causeSections(t *testing.T, page string) []heading {
	t.Helper()
	var out []heading
	in, found := false, false
	for _, h := range headings(page) {
		switch {
		case h.level <= 2:
			in = h.level == 2 && h.text == causesSection
			found = found || in
		case in && h.level == 3:
			out = append(out, h)
		}
	}
	if !found {
		t.Fatalf("no section %q in the page", "## "+causesSection)
	}
	return out
}

// TestDocsCauseSections checks that docs/diagnosis.md has a section per
// cause, in the order of Causes, each under a heading whose anchor is the
// cause, the one DocsLink points at, and no section of a cause the code
// does not know.
func TestDocsCauseSections(t *testing.T) {
	page := diagnosisPage(t)
	var want []string
	for _, info := range diagnosis.Causes() {
		want = append(want, string(info.Cause))
		if link, wantLink := diagnosis.DocsLink(info.Cause), "docs/diagnosis.md#"+string(info.Cause); link != wantLink {
			t.Errorf("DocsLink(%s) = %q, want %q", info.Cause, link, wantLink)
		}
	}
	var got []string
	for _, h := range causeSections(t, page) {
		a := anchor(h.text)
		if !slices.Contains(want, a) {
			t.Errorf("section %q of %s: no cause of that name in diagnosis.Causes()", h.text, causesSection)
		}
		got = append(got, a)
	}
	for _, c := range want {
		if !slices.Contains(got, c) {
			t.Errorf("cause %s: no heading %q in %s", c, "### "+c, causesSection)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("cause sections in the order %v, want that of diagnosis.Causes(): %v", got, want)
	}
	// An anchor given twice would be GitHub's "name-1" the second time.
	seen := map[string]bool{}
	for _, h := range headings(page) {
		a := anchor(h.text)
		if seen[a] && slices.Contains(want, a) {
			t.Errorf("two headings with the anchor %s: the link of the cause reaches the first", a)
		}
		seen[a] = true
	}
}

// TestDocsCauseSectionsNameRuleAndScenario checks that each cause's
// section names the lint rule and the scenario that diagnosis.Causes()
// gives it: the page's and the code's say the same.
func TestDocsCauseSectionsNameRuleAndScenario(t *testing.T) {
	sections := map[string]string{}
	for _, h := range causeSections(t, diagnosisPage(t)) {
		// Lines wrap anywhere: words are compared, not lines.
		sections[anchor(h.text)] = strings.Join(strings.Fields(h.body), " ")
	}
	for _, info := range diagnosis.Causes() {
		body, ok := sections[string(info.Cause)]
		if !ok {
			continue // TestDocsCauseSections tells
		}
		if info.Rule != "" && !strings.Contains(body, "(lint/"+info.Rule+".md)") {
			t.Errorf("section %s does not link the lint rule %s (lint/%s.md)", info.Cause, info.Rule, info.Rule)
		}
		if info.Scenario != "" && !strings.Contains(body, "Scenario: `"+info.Scenario+"`") {
			t.Errorf("section %s does not name its scenario as \"Scenario: `%s`\"", info.Cause, info.Scenario)
		}
	}
}

// TestCausesRules checks that the lint rule of every cause is one of
// closingtime lint's, and has its page in docs/lint.
func TestCausesRules(t *testing.T) {
	var ids []string
	for _, r := range lint.Rules() {
		ids = append(ids, r.ID)
	}
	for _, info := range diagnosis.Causes() {
		if info.Rule == "" {
			continue
		}
		if !slices.Contains(ids, info.Rule) {
			t.Errorf("cause %s: rule %q is not a rule of closingtime lint (%v)", info.Cause, info.Rule, ids)
			continue
		}
		if _, err := os.Stat(filepath.Join(root, "docs", "lint", info.Rule+".md")); err != nil {
			t.Errorf("cause %s: rule %s: %v", info.Cause, info.Rule, err)
		}
	}
}

// TestCausesScenarios checks that the scenario of every cause is one of
// the built-in catalog's.
func TestCausesScenarios(t *testing.T) {
	catalog, err := scenario.Catalog()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range catalog {
		names = append(names, s.Name)
	}
	for _, info := range diagnosis.Causes() {
		if info.Scenario != "" && !slices.Contains(names, info.Scenario) {
			t.Errorf("cause %s: scenario %q is not in the catalog (%v)", info.Cause, info.Scenario, names)
		}
	}
}

// TestCausesDescribed checks that every cause is named once and has a
// title and a fix, that Describe finds each, and that it gives a cause
// it does not know Unknown's description.
func TestCausesDescribed(t *testing.T) {
	seen := map[results.Cause]bool{}
	for _, info := range diagnosis.Causes() {
		if info.Cause == "" || seen[info.Cause] {
			t.Errorf("cause %q: empty or given twice", info.Cause)
		}
		seen[info.Cause] = true
		if strings.TrimSpace(info.Title) == "" {
			t.Errorf("cause %s has no title", info.Cause)
		}
		if strings.TrimSpace(info.Fix) == "" {
			t.Errorf("cause %s has no fix", info.Cause)
		}
		if got := diagnosis.Describe(info.Cause); got != info {
			t.Errorf("Describe(%s) = %+v, want %+v", info.Cause, got, info)
		}
	}
	if got := diagnosis.Describe("from-a-newer-version"); got.Cause != diagnosis.Unknown {
		t.Errorf("Describe of an unknown cause gives %s, want %s", got.Cause, diagnosis.Unknown)
	}
}
