package manifest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"sigs.k8s.io/kustomize/api/konfig"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizationFile returns the kustomization file of dir, or "" when it
// has none.
func kustomizationFile(dir string) string {
	for _, name := range konfig.RecognizedKustomizationFileNames() {
		file := filepath.Join(dir, name)
		if fi, err := os.Stat(file); err == nil && !fi.IsDir() {
			return file
		}
	}
	return ""
}

// kustomize builds the kustomization in dir in process, as `kustomize
// build dir` does with its default options (no plugins, files only from
// within dir's tree unless the kustomization names a remote base, which
// fails without network), and returns its objects, one document each, in
// the order kustomize emits them, each placed where it was written.
//
// kustomize records where each object came from in its origin annotation
// (config.kubernetes.io/origin) when the kustomization's buildMetadata
// asks for originAnnotations; the build asks for them whatever the file
// says, and leaves them out of the objects unless the file asked too. An
// object from a resource file is placed at that file's document of the
// object (see [sourceFiles.find]), a generated one at the generator's field of
// the kustomization file that configured it, and a remote one at the
// resources field of dir's kustomization file.
func kustomize(dir, kustomization string) ([]document, error) {
	fsys := &originFS{FileSystem: filesys.MakeFsOnDisk()}
	root, _, err := fsys.CleanedAbs(dir)
	if err != nil {
		return nil, err
	}
	fsys.kustomization = root.String()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		return nil, err
	}
	sources := sourceFiles{}
	var docs []document
	for _, res := range m.Resources() {
		origin, err := res.GetOrigin()
		if err != nil {
			return nil, err
		}
		if !fsys.asked {
			if err := res.SetOrigin(nil); err != nil {
				return nil, err
			}
		}
		text, err := res.AsYAML()
		if err != nil {
			return nil, err
		}
		docs = append(docs, document{text: text, src: kustomizeSource(dir, kustomization, origin, res, sources)})
	}
	return docs, nil
}

// kustomizeSource returns where the kustomization in dir, whose file is
// kustomization, got res from, by its origin.
func kustomizeSource(dir, kustomization string, origin *resource.Origin, res *resource.Resource, sources sourceFiles) *source {
	switch {
	case origin != nil && origin.Repo == "" && origin.Path != "":
		file := filepath.Join(dir, origin.Path)
		if n := sources.find(file, res.GetKind(), res.GetNamespace(), res.GetName()); n != nil {
			return &source{file: file, node: n}
		}
		return &source{file: file, node: sources.at(file, "")}
	case origin != nil && origin.Repo == "" && origin.ConfiguredIn != "":
		// A generator's object, such as configMapGenerator's ConfigMap:
		// the field is the generator's kind, lower-cased first.
		file, kind := filepath.Join(dir, origin.ConfiguredIn), origin.ConfiguredBy.Kind
		if kind != "" {
			kind = strings.ToLower(kind[:1]) + kind[1:]
		}
		return &source{file: file, node: sources.at(file, kind)}
	}
	return &source{file: kustomization, node: sources.at(kustomization, "resources")}
}

// originFS is the file system kustomize builds from, with the
// kustomization file in directory kustomization read as if its
// buildMetadata listed originAnnotations. A base inherits its parent's
// buildMetadata (api/internal/target/kusttarget.go, accumulateDirectory),
// so that one file is enough.
type originFS struct {
	filesys.FileSystem
	kustomization string // the absolute directory, as kustomize's loader names it
	asked         bool   // the file asked for origin annotations itself
}

// ReadFile reads path, adding originAnnotations to the buildMetadata of
// the kustomization file of fs.kustomization.
func (fs *originFS) ReadFile(path string) ([]byte, error) {
	data, err := fs.FileSystem.ReadFile(path)
	if err != nil || filepath.Dir(path) != fs.kustomization || !slices.Contains(konfig.RecognizedKustomizationFileNames(), filepath.Base(path)) {
		return data, err
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return data, nil // not a mapping: kustomize reports it
	}
	m := doc.Content[0]
	value := &yaml.Node{Kind: yaml.ScalarNode, Value: types.OriginAnnotations}
	switch _, list := mappingValue(m, "buildMetadata"); {
	case list == nil:
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "buildMetadata"},
			&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{value}})
	case list.Kind != yaml.SequenceNode:
		return data, nil // kustomize reports it
	case slices.ContainsFunc(list.Content, func(n *yaml.Node) bool { return n.Value == types.OriginAnnotations }):
		fs.asked = true
		return data, nil
	default:
		list.Content = append(list.Content, value)
	}
	return yaml.Marshal(&doc)
}
