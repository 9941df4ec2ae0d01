package manifest

import (
	"os"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// KustomizeSuffix ends the name of the File that a Reader makes of a
// kustomization directory's output: "overlays/prod" becomes
// "overlays/prod (kustomize build)". Lines in it are lines of that output.
const KustomizeSuffix = " (kustomize build)"

// isKustomization reports whether dir holds a kustomization file.
func isKustomization(dir string) bool {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		if fi, err := os.Stat(filepath.Join(dir, name)); err == nil && !fi.IsDir() {
			return true
		}
	}
	return false
}

// Kustomize builds the kustomization in dir in process, as `kustomize
// build dir` does with its default options (no plugins, files only from
// within dir's tree unless the kustomization names a remote base, which
// fails without network), and returns the resulting manifests.
func Kustomize(dir string) ([]byte, error) {
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	return m.AsYaml()
}
