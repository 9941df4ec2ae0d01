package scenario

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks that Parse never panics, and that what it accepts has a
// name, an action and workload objects. The corpus is testdata's scenarios.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data, nil)
		if err != nil {
			return
		}
		if s.Name == "" || s.Action.Kind == "" || len(s.Objects) == 0 {
			t.Errorf("Parse accepted %q as %+v", data, s)
		}
	})
}
