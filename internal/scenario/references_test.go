package scenario

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// TestReferenceNotices: each $(NAME) that stays as written gets a notice
// at its line, with the entry to add: the downward API's for a name that
// stands for one of its fields, whatever is defined later.
func TestReferenceNotices(t *testing.T) {
	t.Parallel()
	file := filepath.Join("testdata", "valid-unresolved-env.yaml")
	s, err := ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		file + ":36: Deployment app: container app: env LISTEN_ADDR refers to $(MY_POD_IP), which is not defined before it in env: " +
			`it stays as written, and the process gets the text "$(MY_POD_IP)"; add the env entry {name: MY_POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}} before LISTEN_ADDR`,
		file + ":34: Deployment app: container app: args[4] refers to $(WORK), which is not defined in env: " +
			`it stays as written, and the process gets the text "$(WORK)"; define WORK in env`,
	}
	if diff := cmp.Diff(want, referenceNotices(s, objectsOf(s))); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
}

// TestCatalogReferences: every $(NAME) of the catalog's containers
// resolves, so the lab's deploys give no such notice.
func TestCatalogReferences(t *testing.T) {
	t.Parallel()
	catalog, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range catalog {
		if notices := referenceNotices(s, objectsOf(s)); len(notices) > 0 {
			t.Errorf("%s: %q", s.Name, notices)
		}
	}
}

// objectsOf returns the objects of s, as the runner would apply them
// without its changes.
func objectsOf(s *Scenario) []runtime.Object {
	var objects []runtime.Object
	for _, o := range s.Objects {
		objects = append(objects, o.Obj)
	}
	return objects
}

// TestMissingServiceNotice: a Service variable of a Service the workload
// lacks gets a notice that names the Service.
func TestMissingServiceNotice(t *testing.T) {
	got := unresolvedNotice(cluster.UnresolvedRef{Field: "args[0]", Name: "CART_SERVICE_HOST"})
	if want := "add Service cart to the manifests"; !strings.HasSuffix(got, want) {
		t.Errorf("notice %q, want one ending %q", got, want)
	}
	if _, ok := serviceOfVar("POD_IP"); ok {
		t.Error("POD_IP taken for a Service's variable")
	}
}
