package lint

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// TestCorpus lints real-world manifests, Dockerfiles, kustomizations and
// charts (testdata/corpus) with every rule. It pins, in
// testdata/corpus.golden, how many objects were read, every input that
// could not be, and how many findings each rule made, so that a change to
// the parser or a rule shows its effect on real inputs.
func TestCorpus(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "corpus")
	in, errs := Read(manifest.Reader{}, []string{dir})
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	findings := l.Lint(in)

	perRule := make(map[string]int)
	for _, f := range findings {
		perRule[f.Rule]++
		if f.Line < 1 || !strings.HasPrefix(f.File, dir) {
			t.Errorf("finding outside the corpus: %v", f)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "objects: %d\ndockerfiles: %d\nfindings: %d\n", len(in.Objects), len(in.dockerfiles), len(findings))
	for _, r := range Rules() {
		fmt.Fprintf(&b, "  %s: %d\n", r.ID, perRule[r.ID])
	}
	// kustomize names files by absolute path; keep the golden file
	// independent of where the repository is.
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "inputs that could not be read: %d\n", len(errs))
	for _, err := range errs {
		file, line, reason := inputError(err)
		if file == "" {
			t.Errorf("input error names no file: %v", err)
		}
		rel, err := filepath.Rel(dir, file)
		if err != nil {
			t.Fatal(err)
		}
		reason = strings.ReplaceAll(reason, abs+string(filepath.Separator), "")
		fmt.Fprintf(&b, "  %s:%d: %s\n", filepath.ToSlash(rel), line, strings.ReplaceAll(reason, "\n", " "))
	}
	golden.Check(t, filepath.Join("testdata", "corpus.golden"), []byte(b.String()))
}
