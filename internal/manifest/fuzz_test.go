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
