package manifest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/closingtime-dev/closingtime/internal/golden"
)

// inputs returns the manifests under testdata.
func inputs(t testing.TB) []string {
	t.Helper()
	var files []string
	for _, pattern := range []string{"testdata/*.yaml", "testdata/*.json"} {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		t.Fatal("no manifests in testdata")
	}
	return files
}

// writeFiles writes files, by slash-separated path under dir, for a test.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// summary renders what Parse returned, one line per object and error.
func summary(objs []Object, errs []error) string {
	var b strings.Builder
	for _, o := range objs {
		fmt.Fprintf(&b, "%s:%d: %s (%T)\n", o.File, o.Line, o, o.Obj)
	}
	for _, err := range errs {
		fmt.Fprintf(&b, "error: %v\n", err)
	}
	return b.String()
}

func TestParse(t *testing.T) {
	t.Parallel()
	for _, file := range inputs(t) {
		name := filepath.Base(file)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			objs, errs := Parse(name, data)
			if strings.HasPrefix(name, "valid-") && len(errs) > 0 {
				t.Errorf("Parse(%s) errors = %v, want none", name, errs)
			}
			if strings.HasPrefix(name, "invalid-") && len(errs) == 0 {
				t.Errorf("Parse(%s) returned no error", name)
			}
			for _, err := range errs {
				var e *Error
				if !errors.As(err, &e) || e.File != name || e.Line < 1 {
					t.Errorf("error %v is not an *Error naming %s and a line", err, name)
				}
			}
			got := summary(objs, errs)
			golden.Check(t, strings.TrimSuffix(file, filepath.Ext(file))+".golden", []byte(got))
		})
	}
}

func TestFieldLine(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("testdata/valid-multidoc.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs, errs := Parse("valid-multidoc.yaml", data)
	if len(errs) > 0 || len(objs) != 4 {
		t.Fatalf("Parse() = %d objects, errors %v; want 4 objects", len(objs), errs)
	}
	deploy, pdb := objs[0], objs[2]
	tests := []struct {
		name string
		obj  Object
		path string
		want int
	}{
		{name: "object", obj: deploy, path: "", want: 3},
		{name: "top-level field", obj: deploy, path: "spec", want: 8},
		{name: "nested field", obj: deploy, path: "spec.replicas", want: 9},
		{name: "list element", obj: deploy, path: "spec.template.spec.containers[0]", want: 19},
		{name: "field of list element", obj: deploy, path: "spec.template.spec.containers[0].readinessProbe.httpGet.path", want: 25},
		{name: "absent field points at parent", obj: deploy, path: "spec.template.spec.containers[0].livenessProbe", want: 19},
		{name: "absent element points at list", obj: deploy, path: "spec.template.spec.containers[3].image", want: 18},
		{name: "absent top-level field", obj: deploy, path: "spec.strategy.rollingUpdate.maxUnavailable", want: 8},
		{name: "name applied to a list", obj: deploy, path: "spec.template.spec.containers.ports.containerPort", want: 22},
		{name: "bracketed key", obj: deploy, path: "spec.template.metadata.labels[app]", want: 16},
		{name: "document after comment-only document", obj: pdb, path: "spec.maxUnavailable", want: 48},
		{name: "zero object", obj: Object{}, path: "spec", want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.obj.FieldLine(tt.path); got != tt.want {
				t.Errorf("FieldLine(%q) = %d, want %d", tt.path, got, tt.want)
			}
		})
	}
}

// TestSyntaxErrorLine: a YAML mistake is reported on its own line, where
// go.yaml.in/yaml/v3's text names the line of the mapping or sequence it
// breaks (the line before a key indented too little, the line above a
// sequence whose entry lacks its "-").
func TestSyntaxErrorLine(t *testing.T) {
	t.Parallel()
	const head = "apiVersion: v1\nkind: Service\nmetadata:\n"
	tests := []struct {
		name     string
		text     string
		wantLine int
		wantErr  string
	}{
		{name: "key indented too little", text: head + "  name: a\n labels: {a: b}\n", wantLine: 5, wantErr: "did not find expected key"},
		{name: "key indented too little in a nested mapping",
			text: head + "  name: a\nspec:\n  selector:\n    app: a\n   type: ClusterIP\n", wantLine: 8, wantErr: "did not find expected key"},
		{name: "key indented too much", text: head + "  name: a\n   labels: {a: b}\n", wantLine: 5, wantErr: "mapping values are not allowed in this context"},
		{name: "sequence entry without its dash",
			text: head + "  name: a\nspec:\n  ports:\n    - port: 80\n    targetPort: 8080\n", wantLine: 8, wantErr: "did not find expected '-' indicator"},
		{name: "tab as indentation", text: head + "\tname: a\n", wantLine: 4, wantErr: "found character that cannot start any token"},
		{name: "in a later document",
			text: head + "  name: a\n---\n" + head + "  name: b\n labels: {a: b}\n", wantLine: 10, wantErr: "did not find expected key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, errs := Parse("svc.yaml", []byte(tt.text))
			if len(errs) != 1 {
				t.Fatalf("Parse() errors = %v, want one", errs)
			}
			var e *Error
			if !errors.As(errs[0], &e) || e.Line != tt.wantLine || e.Err.Error() != tt.wantErr {
				t.Errorf("Parse() error = %v, want svc.yaml:%d: %s", errs[0], tt.wantLine, tt.wantErr)
			}
		})
	}
}

func TestRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	files := map[string]string{
		"a.yaml":         "apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n",
		"sub/b.yml":      "apiVersion: v1\nkind: Service\nmetadata:\n  name: b\n",
		"sub/c.json":     `{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "c"}}`,
		"sub/notes.txt":  "not a manifest",
		".git/d.yaml":    "apiVersion: v1\nkind: Service\nmetadata:\n  name: hidden\n",
		"broken.yaml":    "apiVersion: v1\nkind: [\n",
		"named.manifest": "apiVersion: v1\nkind: Service\nmetadata:\n  name: named\n",
	}
	writeFiles(t, dir, files)
	stdin := strings.NewReader("apiVersion: v1\nkind: Service\nmetadata:\n  name: in\n")
	missing := filepath.Join(dir, "missing.yaml")
	objs, errs := Reader{Stdin: stdin}.Read([]string{dir, filepath.Join(dir, "named.manifest"), "-", missing, "-"})

	var got []string
	for _, o := range objs {
		name := o.File
		if name != Stdin {
			rel, err := filepath.Rel(dir, name)
			if err != nil {
				t.Fatal(err)
			}
			name = filepath.ToSlash(rel)
		}
		got = append(got, name+" "+o.Meta().GetName())
	}
	want := []string{"a.yaml a", "sub/b.yml b", "sub/c.json c", "named.manifest named", Stdin + " in"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Read() objects mismatch (-want +got):\n%s", diff)
	}

	if len(errs) != 2 {
		t.Fatalf("Read() errors = %v, want 2 (broken.yaml, missing.yaml)", errs)
	}
	byFile := make(map[string]*Error)
	for _, err := range errs {
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %v is not an *Error", err)
		}
		byFile[filepath.Base(e.File)] = e
	}
	if e := byFile["broken.yaml"]; e == nil || e.Line != 2 {
		t.Errorf("broken.yaml error = %v, want one at line 2", e)
	}
	e := byFile["missing.yaml"]
	if e == nil || e.File != missing || !errors.Is(e, os.ErrNotExist) {
		t.Fatalf("missing.yaml error = %v, want %s not found", e, missing)
	}
	if want := missing + ": no such file or directory"; e.Error() != want {
		t.Errorf("missing.yaml error text = %q, want %q", e.Error(), want)
	}
}

// TestStripPath: an input that exists but cannot be read is named once, with
// the reason alone, as a missing one is, and the reason still matches its
// system error.
func TestStripPath(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file.yaml")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	under := filepath.Join(file, "x.yaml")
	_, errs := Reader{}.Read([]string{under})
	if len(errs) != 1 {
		t.Fatalf("Read(%s) errors = %v, want 1", under, errs)
	}
	if want := under + ": not a directory"; errs[0].Error() != want || !errors.Is(errs[0], syscall.ENOTDIR) {
		t.Errorf("Read(%s) error = %q, want %q", under, errs[0], want)
	}
	_, err := os.ReadFile(dir)
	if got := StripPath(err); got == nil || got.Error() != "is a directory" || !errors.Is(got, syscall.EISDIR) {
		t.Errorf("StripPath(%q) = %v, want is a directory", err, got)
	}
	other := errors.New("helm template: no Chart.yaml")
	if got := StripPath(other); got != other {
		t.Errorf("StripPath(%q) = %v, want it unchanged", other, got)
	}
}
