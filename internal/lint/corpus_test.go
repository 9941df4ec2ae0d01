package lint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// TestCorpus lints real-world manifests, Dockerfiles, kustomizations and
// charts (testdata/corpus) with every rule. It pins, in
// testdata/corpus.golden, how many objects were read, every input that
// could not be, every file skipped as no manifest, and how many findings each rule made, so that a change to
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
	fmt.Fprintf(&b, "skipped, holding no Kubernetes object: %d\n", len(in.Skipped))
	for _, name := range in.Skipped {
		rel, err := filepath.Rel(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "  %s\n", filepath.ToSlash(rel))
	}
	golden.Check(t, filepath.Join("testdata", "corpus.golden"), []byte(b.String()))
}

// TestMicroservicesDemo lints a kustomization and a Helm chart of a real
// application (testdata/microservices-demo) and pins the report, text and
// SARIF: every finding points at the file it came from, a resource of the
// kustomization or a template of the chart, at a line that writes its
// field or the field's nearest ancestor, and SARIF names that file by a
// relative URI.
func TestMicroservicesDemo(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("testdata", "microservices-demo")
	kustomization, chart := filepath.Join(dir, "kubernetes-manifests"), filepath.Join(dir, "helm-chart")
	in, errs := Read(manifest.Reader{}, []string{kustomization, chart})
	if len(errs) > 0 {
		t.Fatalf("Read() errors = %v", errs)
	}
	l, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := Report{Version: "v1.2.3", Rules: l.Rules(), Findings: l.Lint(in)}
	if len(r.Findings) == 0 {
		t.Fatal("no findings")
	}
	for _, f := range r.Findings {
		if !strings.HasPrefix(f.File, kustomization+string(filepath.Separator)) && !strings.HasPrefix(f.File, filepath.Join(chart, "templates")+string(filepath.Separator)) {
			t.Errorf("finding in %s, not in a resource or a template: %v", f.File, f)
			continue
		}
		if text := fileLine(t, f.File, f.Line); !writesField(text, f.Field) {
			t.Errorf("%s:%d is %q, which writes neither %s nor an ancestor of it", f.File, f.Line, text, f.Field)
		}
	}

	var text, sarif bytes.Buffer
	if err := WriteText(&text, r, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteSARIF(&sarif, r); err != nil {
		t.Fatal(err)
	}
	var log sarifLog
	if err := json.Unmarshal(sarif.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	for _, res := range log.Runs[0].Results {
		uri := res.Locations[0].Physical.Artifact.URI
		u, err := url.Parse(uri)
		if err != nil || u.IsAbs() {
			t.Errorf("SARIF uri %q is not a relative URI", uri)
			continue
		}
		if _, err := os.Stat(filepath.FromSlash(u.Path)); err != nil {
			t.Errorf("SARIF uri %q names no file: %v", uri, err)
		}
	}
	golden.Check(t, filepath.Join("testdata", "microservices-demo.golden"), text.Bytes())
	golden.Check(t, filepath.Join("testdata", "microservices-demo.sarif.golden"), sarif.Bytes())
}

// fileLine returns line n of file, without its indentation.
func fileLine(t *testing.T, file string, n int) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	if n < 1 || n > len(lines) {
		t.Fatalf("%s has no line %d", file, n)
	}
	return strings.TrimSpace(lines[n-1])
}

// writesField reports whether a manifest's line writes the field at path,
// or one of its ancestors: a key of the path, or a list element for an
// index ("- name: server" for containers[0]).
func writesField(line, path string) bool {
	for _, seg := range strings.FieldsFunc(path, func(r rune) bool { return r == '.' || r == '[' || r == ']' }) {
		if _, err := strconv.Atoi(seg); err == nil {
			if strings.HasPrefix(line, "- ") {
				return true
			}
			continue
		}
		if strings.HasPrefix(strings.TrimPrefix(line, "- "), seg+":") {
			return true
		}
	}
	return false
}
