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
// resolves, and none names a Service by its DNS name, so the lab's deploys
// give no such notice.
func TestCatalogReferences(t *testing.T) {
	t.Parallel()
	catalog, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range catalog {
		if notices := append(referenceNotices(s, objectsOf(s)), dnsNameNotices(s, objectsOf(s))...); len(notices) > 0 {
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

// TestDNSNameNotices: a container, or an init container, that names a
// Service of the workload by its DNS name where a host goes gets a notice
// at its line; a word that only spells the name does not.
func TestDNSNameNotices(t *testing.T) {
	t.Parallel()
	file := filepath.Join("testdata", "valid-dns-names.yaml")
	s, err := ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fix := "which no pod of this cluster resolves (it has no cluster DNS): write $(SHOP_SERVICE_HOST) for the host, the Service's cluster IP, which the kubelet sets in the container's env"
	want := []string{
		file + `:47: Deployment app: container wait: env TARGET names Service shop by its DNS name "shop", ` + fix,
		file + `:54: Deployment app: container app: env SHOP_URL names Service shop by its DNS name "shop", ` + fix,
		file + `:51: Deployment app: container app: args[2] names Service shop by its DNS name "shop.default.svc.cluster.local", ` + fix,
	}
	if diff := cmp.Diff(want, dnsNameNotices(s, objectsOf(s))); diff != "" {
		t.Errorf("notices (-want +got):\n%s", diff)
	}
}

func TestDNSNameIn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s, want string
	}{
		{"http://shop", "shop"},
		{"grpc://shop:50051", "shop"},
		{"shop:80", "shop"},
		{"--upstream=shop:80", "shop"},
		{"shop.default", "shop.default"},
		{"http://shop.default.svc:80/x", "shop.default.svc"},
		{"a,shop.default.svc.cluster.local", "shop.default.svc.cluster.local"},
		{"shop", ""},
		{"shop:http", ""},
		{"workshop:80", ""},
		{"shop-api:80", ""},
		{"http://shop.example.com", ""},
		{"shop.other:80", ""},
	} {
		got, ok := dnsNameIn(tc.s, "shop", "default")
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("dnsNameIn(%q) = %q, %v; want %q", tc.s, got, ok, tc.want)
		}
	}
}
