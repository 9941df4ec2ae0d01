package manifest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that no input makes Parse panic, that every object and
// error it returns lies within the input, and that field lookups stay safe.
func FuzzParse(f *testing.F) {
	seeds := inputs(f)
	lint, err := filepath.Glob("../lint/testdata/*/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range append(seeds, lint...) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		objs, errs := Parse("fuzz.yaml", data)
		for _, o := range objs {
			if o.Obj == nil || o.Line < 1 || o.Line > lines {
				t.Fatalf("object %v at line %d of %d", o.Obj, o.Line, lines)
			}
			_ = o.String()
			for _, path := range []string{"", "spec.template.spec.containers[0].image", "metadata.annotations[a.b/c]", "[", "a]b[", "items[99]"} {
				if l := o.FieldLine(path); l < 1 || l > lines {
					t.Fatalf("FieldLine(%q) = %d, outside 1..%d", path, l, lines)
				}
			}
		}
		for _, err := range errs {
			e, ok := err.(*Error)
			if !ok || e.Line < 1 || e.Line > lines {
				t.Fatalf("error %v is not an *Error within 1..%d", err, lines)
			}
		}
	})
}

// FuzzAlignLines checks that alignLines maps each rendered line to a line
// of the template or none, in order, each template line at most once.
func FuzzAlignLines(f *testing.F) {
	f.Add([]byte("a: 1\nb: {{ .Values.b }}\n{{- if .x }}\nc: 3\n{{- end }}\n"), []byte("a: 1\nb: 2\nc: 3\n"))
	f.Add([]byte("x: {{- .a -}} y {{ .b }}\n"), []byte("x:1y 2\n"))
	f.Fuzz(func(t *testing.T, template, rendered []byte) {
		lines := alignLines(rendered, template)
		if want := len(textLines(rendered)); len(lines) != want {
			t.Fatalf("%d lines, want %d", len(lines), want)
		}
		max, last := len(textLines(template)), 0
		for i, l := range lines {
			if l == 0 {
				continue
			}
			if l <= last || l > max {
				t.Fatalf("line %d maps to %d after %d, of %d template lines", i+1, l, last, max)
			}
			last = l
		}
	})
}
