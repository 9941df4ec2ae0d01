package lint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

func TestSupervisordOverGrace(t *testing.T) { testRule(t, &supervisordOverGrace) }

// TestUncheckedSupervisord: a workload whose supervisord reads a
// configuration that is not among the inputs gets a note; one whose
// configuration came along (here, a ConfigMap it mounts) gets none.
func TestUncheckedSupervisord(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "app.yaml")
	err := os.WriteFile(file, []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: app}
spec:
  selector: {matchLabels: {app: app}}
  template:
    metadata: {labels: {app: app}}
    spec:
      containers:
      - name: app
        image: app
        command: [supervisord, -n, -c, /etc/app/sv.conf]
`), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	in, errs := Read(manifest.Reader{}, []string{file})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	notes := UncheckedSupervisord(in)
	if len(notes) != 1 || !strings.Contains(notes[0], "sv.conf, which is not among the inputs") || !strings.Contains(notes[0], "app.yaml:1") {
		t.Errorf("notes %q, want one for sv.conf at app.yaml:1", notes)
	}
	in, errs = Read(manifest.Reader{}, []string{"testdata/supervisord-over-grace/invalid-sum.yaml"})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if notes := UncheckedSupervisord(in); len(notes) > 0 {
		t.Errorf("notes %q for a workload whose configuration came along, want none", notes)
	}
}
