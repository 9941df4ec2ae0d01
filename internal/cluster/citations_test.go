package cluster

import (
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoRoot is the repository's root, seen from this package.
const repoRoot = "../.."

// ruleKey matches a cited rule key of docs/kubernetes.md: a section letter
// and a number (T7), or § and a section number (§10). A dotted section
// number (RFC 9110 §9.2.2) belongs to another document.
var ruleKey = regexp.MustCompile(`\b[TEPBDXIC][0-9]{1,2}\b|§[0-9]+(\.[0-9]+)*`)

// definedKey matches where docs/kubernetes.md defines a key: a rule's entry
// ("- **T7 …") or a section's heading ("## §10 …").
var definedKey = regexp.MustCompile(`(?m)^(?:- \*\*|## )((?:[A-Z]|§)[0-9]+) `)

// outsideDocs names documents that are not in the repository: nothing in it
// may cite them. (design.md is: docs/design.md.)
var outsideDocs = []string{"k8s-semantics", "style.md", "peers-and-beyond", "../shared"}

// TestRuleCitations checks that every rule key cited in a comment of a Go
// file or in a Markdown page (testdata aside) is defined in
// docs/kubernetes.md and cited as a key of that page, and that none of them
// cites a document the repository does not hold.
func TestRuleCitations(t *testing.T) {
	t.Parallel()
	page, err := os.ReadFile(filepath.Join(repoRoot, "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range definedKey.FindAllStringSubmatch(string(page), -1) {
		if defined[m[1]] {
			t.Errorf("docs/kubernetes.md defines %s twice", m[1])
		}
		defined[m[1]] = true
	}
	cited := 0
	err = filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != repoRoot && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		var texts []text
		switch filepath.Ext(path) {
		case ".go":
			texts, err = goComments(path)
		case ".md":
			texts, err = markdown(path)
		default:
			return nil
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		for _, x := range texts {
			for _, m := range ruleKey.FindAllStringIndex(x.s, -1) {
				key := x.s[m[0]:m[1]]
				if strings.Contains(key, ".") {
					continue
				}
				cited++
				switch {
				case !defined[key]:
					t.Errorf("%s:%d: cites %s, which docs/kubernetes.md does not define: add the rule there, or word this otherwise if it is no rule",
						rel, x.line(m[0]), key)
				case strings.HasSuffix(x.s[:m[0]], "spec "):
					t.Errorf("%s:%d: cites spec %s: cite docs/kubernetes.md %s, or %s alone where the package's doc points there",
						rel, x.line(m[0]), key, key, key)
				}
			}
			for _, doc := range outsideDocs {
				if i := strings.Index(x.s, doc); i >= 0 {
					t.Errorf("%s:%d: cites %q, which is not in the repository", rel, x.line(i), doc)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) == 0 || cited == 0 {
		t.Fatalf("%d keys defined, %d cited: the walk missed the repository", len(defined), cited)
	}
}

// text is a piece of a file that may cite rules, and the line it starts on.
type text struct {
	s     string
	start int
}

// line returns the line of byte offset i of x.
func (x text) line(i int) int {
	return x.start + strings.Count(x.s[:i], "\n")
}

// goComments returns the comments of the Go file at path.
func goComments(path string) ([]text, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	var s scanner.Scanner
	s.Init(fset.AddFile(path, -1, len(src)), src, nil, scanner.ScanComments)
	var texts []text
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return texts, nil
		}
		if tok == token.COMMENT {
			texts = append(texts, text{lit, fset.Position(pos).Line})
		}
	}
}

// markdown returns the Markdown file at path as one text.
func markdown(path string) ([]text, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return []text{{string(src), 1}}, nil
}
