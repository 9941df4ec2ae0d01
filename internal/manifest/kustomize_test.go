package manifest

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
)

func TestReadKustomization(t *testing.T) {
	t.Parallel()
	overlay := filepath.Join("testdata", "kustomize", "overlays", "prod")
	broken := filepath.Join("testdata", "kustomize", "broken")

	objs, errs := Reader{}.Read([]string{overlay, broken})
	if len(objs) != 2 {
		t.Fatalf("Read() = %d objects, want the overlay's Deployment and Service", len(objs))
	}
	for _, o := range objs {
		if o.File != overlay+KustomizeSuffix || o.Meta().GetNamespace() != "shop" {
			t.Errorf("object %s from %s, want namespace shop from %s", o, o.File, overlay+KustomizeSuffix)
		}
	}
	i := slices.IndexFunc(objs, func(o Object) bool { return o.Kind() == "Deployment" })
	if i < 0 || *objs[i].Obj.(*appsv1.Deployment).Spec.Replicas != 3 {
		t.Fatalf("objects = %v, want the patched Deployment with 3 replicas", objs)
	}
	if line := objs[i].FieldLine("spec.replicas"); line <= objs[i].Line {
		t.Errorf("FieldLine(spec.replicas) = %d, not after the object's line %d", line, objs[i].Line)
	}

	if len(errs) != 1 {
		t.Fatalf("Read() errors = %v, want one for %s", errs, broken)
	}
	var e *Error
	if !errors.As(errs[0], &e) || e.File != broken || !strings.Contains(e.Error(), "kustomize build") {
		t.Errorf("error = %v, want a kustomize build error naming %s", errs[0], broken)
	}
}

func TestReadWalksIntoKustomizations(t *testing.T) {
	t.Parallel()
	// Walking testdata/kustomize builds each kustomization once, and does
	// not read the base's files on their own.
	objs, errs := Reader{}.Read([]string{filepath.Join("testdata", "kustomize")})
	files := make(map[string]int)
	for _, o := range objs {
		files[filepath.ToSlash(o.File)]++
	}
	want := map[string]int{
		"testdata/kustomize/base" + KustomizeSuffix:          2,
		"testdata/kustomize/overlays/prod" + KustomizeSuffix: 2,
	}
	if diff := cmp.Diff(want, files); diff != "" {
		t.Errorf("objects by file mismatch (-want +got):\n%s", diff)
	}
	if len(errs) != 1 {
		t.Errorf("errors = %v, want one for the broken kustomization", errs)
	}
}
