package manifest

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
)

// originAnnotation is where kustomize writes where an object came from,
// when a kustomization's buildMetadata lists originAnnotations.
const originAnnotation = "config.kubernetes.io/origin"

func TestReadKustomization(t *testing.T) {
	t.Parallel()
	overlay := filepath.Join("testdata", "kustomize", "overlays", "prod")
	base := filepath.Join("testdata", "kustomize", "base")
	broken := filepath.Join("testdata", "kustomize", "broken")

	objs, errs := Reader{}.Read([]string{overlay, broken})
	if len(objs) != 2 {
		t.Fatalf("Read() = %d objects, want the overlay's Deployment and Service", len(objs))
	}
	for _, o := range objs {
		if o.Build != overlay || o.Meta().GetNamespace() != "shop" || filepath.Dir(o.File) != base || o.Line != 1 {
			t.Errorf("object %s at %s:%d built by %q, want namespace shop, from %s at line 1, built by %s", o, o.File, o.Line, o.Build, base, overlay)
		}
		if _, ok := o.Meta().GetAnnotations()[originAnnotation]; ok {
			t.Errorf("object %s has kustomize's origin annotation, which its kustomization did not ask for", o)
		}
	}
	i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind() == "Deployment" })
	if i < 0 || *objs[i].Obj.(*appsv1.Deployment).Spec.Replicas != 3 {
		t.Fatalf("objects = %v, want the patched Deployment with 3 replicas", objs)
	}
	// The base's lines, for the values the overlay patched too.
	for path, want := range map[string]int{"spec.replicas": 6, "spec.template.spec.containers[0].image": 17, "metadata.namespace": 3} {
		if got := objs[i].FieldLine(path); got != want {
			t.Errorf("FieldLine(%s) = %d, want line %d of %s", path, got, want, objs[i].File)
		}
	}

	if len(errs) != 1 {
		t.Fatalf("Read() errors = %v, want one for %s", errs, broken)
	}
	var e *Error
	if !errors.As(errs[0], &e) || e.File != broken || !strings.Contains(e.Error(), "kustomize build") {
		t.Errorf("error = %v, want a kustomize build error naming %s", errs[0], broken)
	}
}

// TestKustomizeSources: each object of a build is placed in the file and
// at the document it came from, whatever the kustomization renamed; a
// generated one at its generator; a field that the object's type does not
// have is reported at its line in its file; and a kustomization that asks
// for origin annotations gets them.
func TestKustomizeSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	deployment := func(name, field string) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: " + name + "\nspec:\n  template:\n    spec:\n      containers:\n        - name: " + name + "\n          image: " + name + field + "\n"
	}
	files := map[string]string{
		"base/kustomization.yaml": "resources:\n  - apps.yaml\n  - typo.yaml\n",
		// Two documents, the second at line 12.
		"base/apps.yaml": "# Two apps.\n" + deployment("api", "") + "---\n" + deployment("web", ""),
		"base/typo.yaml": deployment("typo", "\n          readinesProbe: {}"),
		"prod/kustomization.yaml": "namePrefix: prod-\nnamespace: shop\nresources:\n  - ../base\n" +
			"configMapGenerator:\n  - name: settings\n    literals: [a=b]\nbuildMetadata: [originAnnotations]\n",
	}
	writeFiles(t, dir, files)
	prod := filepath.Join(dir, "prod")
	objs, errs := Reader{}.Read([]string{prod})

	var got []string
	for _, o := range objs {
		rel, err := filepath.Rel(dir, o.File)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, o.String()+" "+filepath.ToSlash(rel)+":"+strconv.Itoa(o.Line)+" image:"+strconv.Itoa(o.FieldLine("spec.template.spec.containers[0].image")))
		if _, ok := o.Meta().GetAnnotations()[originAnnotation]; !ok {
			t.Errorf("object %s lacks the origin annotation its kustomization asked for", o)
		}
	}
	want := []string{
		"ConfigMap shop/prod-settings-" + configMapHash(objs) + " prod/kustomization.yaml:5 image:5",
		"Deployment shop/prod-api base/apps.yaml:2 image:11",
		"Deployment shop/prod-web base/apps.yaml:13 image:22",
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	var e *Error
	if len(errs) != 1 || !errors.As(errs[0], &e) || e.File != filepath.Join(dir, "base", "typo.yaml") || e.Line != 11 ||
		!strings.Contains(e.Error(), `unknown field "spec.template.spec.containers[0].readinesProbe"`) {
		t.Errorf("errors = %v, want base/typo.yaml:11: unknown field readinesProbe", errs)
	}
}

// configMapHash returns the hash kustomize appended to the generated
// ConfigMap's name, for comparing the rest.
func configMapHash(objs []Object) string {
	for _, o := range objs {
		if o.Kind() == "ConfigMap" {
			return strings.TrimPrefix(o.Meta().GetName(), "prod-settings-")
		}
	}
	return ""
}

func TestReadWalksIntoKustomizations(t *testing.T) {
	t.Parallel()
	// Walking testdata/kustomize builds each kustomization once, and does
	// not read the base's files on their own.
	objs, errs := Reader{}.Read([]string{filepath.Join("testdata", "kustomize")})
	builds := make(map[string]int)
	for _, o := range objs {
		builds[filepath.ToSlash(o.Build)]++
	}
	want := map[string]int{
		"testdata/kustomize/base":          2,
		"testdata/kustomize/overlays/prod": 2,
	}
	if diff := cmp.Diff(want, builds); diff != "" {
		t.Errorf("objects by build mismatch (-want +got):\n%s", diff)
	}
	if len(errs) != 1 {
		t.Errorf("errors = %v, want one for the broken kustomization", errs)
	}
}
