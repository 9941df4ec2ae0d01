package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Stdin is the name [Read] gives to standard input, in positions and errors.
const Stdin = "<stdin>"

// Reader reads manifests as kubectl's -f does, and builds kustomizations
// and renders Helm charts on the way. The zero Reader reads *.yaml, *.yml
// and *.json files from directories, with an empty standard input.
type Reader struct {
	// Match reports whether to read a file found in a directory; nil means
	// IsManifestName. A file named in paths is read whatever its name.
	Match func(name string) bool
	// Values are Helm values files merged, in order, over each chart's
	// values.yaml.
	Values []string
	// Stdin is read for "-"; nil means an empty input.
	Stdin io.Reader
}

// Read reads the manifests at paths: a file whatever its name; a directory
// recursively, taking the files r.Match accepts and skipping directories
// whose names begin with a dot; "-" for standard input, read once. A
// directory (given or found) that holds a kustomization file is built as
// `kustomize build` builds it instead of walked, and one that holds a
// Chart.yaml rendered as `helm template` renders it, in process (see
// [File.Built]). Read returns the objects of every readable document, in
// the order of paths (a directory's files in lexical order), and an
// [*Error] for each file or document it could not read, build or render.
func (r Reader) Read(paths []string) ([]Object, []error) {
	files, errs := r.ReadFiles(paths)
	var objs []Object
	for _, f := range files {
		o, e := f.Parse()
		objs = append(objs, o...)
		errs = append(errs, e...)
	}
	return objs, errs
}

// File is one input file's name and content, or a kustomization's or a
// chart's output.
type File struct {
	// Name is the path as given or found in a directory, or [Stdin] for
	// standard input; for a kustomization's or a chart's output, its
	// directory.
	Name string
	// Data is the file's content; nil for a kustomization's or a chart's
	// output.
	Data []byte
	// Built reports whether the file is the output of the kustomization
	// or chart in directory Name. Its objects are the kustomization's
	// build or the chart's templates rendered with the Reader's Values,
	// and [File.Parse] gives each one the position it was written at in
	// its source: the resource file that holds it, or the template that
	// rendered it (see [Object.Build]).
	Built bool
	// Found reports whether the file was found in a directory rather
	// than named in the paths.
	Found bool

	docs []document // a build's documents, each with its source
}

// Parse decodes the file's manifests as [Parse] does, or the documents of
// a kustomization's or a chart's output, each at its position in its
// source file, with the directory as the objects' Build.
func (f File) Parse() ([]Object, []error) {
	if !f.Built {
		return Parse(f.Name, f.Data)
	}
	objs, errs := parseDocuments(f.Name, f.docs)
	for i := range objs {
		objs[i].Build = f.Name
	}
	return objs, errs
}

// ReadFiles reads the files at paths as Read does, without parsing them;
// a kustomization or a chart is built or rendered. It returns them in
// order, and an [*Error] for each file or directory it could not read,
// build or render.
func (r Reader) ReadFiles(paths []string) ([]File, []error) {
	match := r.Match
	if match == nil {
		match = IsManifestName
	}
	var files []File
	var errs []error
	stdinRead := false
	for _, p := range paths {
		if p == "-" {
			if stdinRead {
				continue
			}
			stdinRead = true
			var data []byte
			if r.Stdin != nil {
				var err error
				if data, err = io.ReadAll(r.Stdin); err != nil {
					errs = append(errs, &Error{File: Stdin, Err: err})
					continue
				}
			}
			files = append(files, File{Name: Stdin, Data: data})
			continue
		}
		err := filepath.WalkDir(p, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				errs = append(errs, fileError(name, err))
				return nil
			}
			if !d.IsDir() {
				if name != p && !match(name) {
					return nil
				}
				data, err := os.ReadFile(name)
				if err != nil {
					errs = append(errs, fileError(name, err))
					return nil
				}
				files = append(files, File{Name: name, Data: data, Found: name != p})
				return nil
			}
			if name != p && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			var docs []document
			switch kustomization := kustomizationFile(name); {
			case kustomization != "":
				if docs, err = kustomize(name, kustomization); err != nil {
					err = fmt.Errorf("kustomize build: %w", err)
				}
			case isChart(name):
				if docs, err = renderChart(name, r.Values); err != nil {
					err = fmt.Errorf("helm template: %w", err)
				}
			default:
				return nil
			}
			if err != nil {
				errs = append(errs, &Error{File: name, Err: err})
			} else {
				files = append(files, File{Name: name, Built: true, docs: docs})
			}
			return filepath.SkipDir
		})
		if err != nil {
			errs = append(errs, fileError(p, err))
		}
	}
	return files, errs
}

// IsManifestName reports whether a Reader takes a file of this name, found in a
// directory, for a manifest: its extension is .yaml, .yml or .json.
func IsManifestName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// fileError returns err as the *Error of the file name.
func fileError(name string, err error) *Error {
	return &Error{File: name, Err: StripPath(err)}
}

// StripPath returns the reason of the *fs.PathError in err's chain, without
// its operation and path, for a message that names the file already:
// "deploy.yaml: no such file or directory", "deploy.yaml: is a directory".
// It returns any other error unchanged. Every command spells an input it
// could not read this way.
func StripPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
