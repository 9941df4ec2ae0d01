package lint

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// FuzzLint checks that no manifest makes a rule panic, and that every
// finding points at a line of its input.
func FuzzLint(f *testing.F) {
	addSeeds(f, "testdata/*/*.yaml")
	l, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _ := manifest.Parse("fuzz.yaml", data)
		for _, finding := range l.Lint(Input{Objects: objs}) {
			if finding.Line < 1 || finding.Message == "" {
				t.Fatalf("finding without a line or message: %+v", finding)
			}
		}
	})
}

// FuzzParseDockerfile checks that no Dockerfile makes the parser panic and
// that the instructions it returns lie within the input.
func FuzzParseDockerfile(f *testing.F) {
	addSeeds(f, "testdata/*/*Dockerfile")
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		argv, in := parseDockerfile("Dockerfile", data).process()
		if in != nil && (in.line < 1 || in.line > lines) {
			t.Fatalf("instruction at line %d of %d", in.line, lines)
		}
		firstProcessProblem(argv)
	})
}

// FuzzParseSupervisord checks that no configuration makes the parser
// panic and that the programs it returns lie within the input.
func FuzzParseSupervisord(f *testing.F) {
	addSeeds(f, "testdata/*/*.conf")
	f.Fuzz(func(t *testing.T, data []byte) {
		lines := bytes.Count(data, []byte("\n")) + 1
		for _, p := range parseSupervisord("supervisord.conf", data) {
			for key := range p.settings {
				if _, line := p.position(key); line < 1 || line > lines {
					t.Fatalf("%s at line %d of %d", key, line, lines)
				}
			}
			firstProcessProblem(splitWords(p.settings["command"].value))
		}
	})
}

// addSeeds adds every file that pattern matches to f's seed corpus.
func addSeeds(f *testing.F, pattern string) {
	f.Helper()
	files, err := filepath.Glob(pattern)
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
}
