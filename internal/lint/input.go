package lint

import (
	"bytes"

	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// Input is what a lint run checks: Kubernetes objects, and the Dockerfiles
// and supervisord configurations that [Read] finds.
type Input struct {
	// Objects are the Kubernetes objects.
	Objects []manifest.Object
	// Skipped are the files found in directories, by a manifest's name,
	// that hold no Kubernetes object (see manifest.HoldsObject): a
	// package.json, a Helm values file, the results of closingtime
	// rollout. They are not read.
	Skipped []string

	dockerfiles []*dockerfile
	programs    []*program
}

// Read reads the inputs at paths with r, as manifest.Reader.Read does,
// but taking from directories the files that manifest.IsManifestName,
// IsDockerfileName or IsSupervisordName accept, whatever r.Match says. A
// file is a Dockerfile or supervisord configuration by its name, and
// otherwise manifests (standard input is manifests); a file found in a
// directory by a manifest's name that holds no Kubernetes object is
// skipped, and listed in Input.Skipped. It returns everything
// it could read, and an error naming each input, with a line where it has
// one, that it could not.
func Read(r manifest.Reader, paths []string) (Input, []error) {
	r.Match = func(name string) bool {
		return manifest.IsManifestName(name) || IsDockerfileName(name) || IsSupervisordName(name)
	}
	files, errs := r.ReadFiles(paths)
	var in Input
	for _, f := range files {
		errs = append(errs, in.add(f)...)
	}
	return in, errs
}

// add parses one file into in, choosing the parser by its name; a
// kustomization's or a chart's output is manifests.
func (in *Input) add(f manifest.File) []error {
	switch {
	case f.Built:
	case f.Found && manifest.IsManifestName(f.Name) && !manifest.HoldsObject(f.Data):
		in.Skipped = append(in.Skipped, f.Name)
		return nil
	case IsDockerfileName(f.Name):
		in.dockerfiles = append(in.dockerfiles, parseDockerfile(f.Name, f.Data))
		return nil
	case IsSupervisordName(f.Name):
		if bytes.Contains(f.Data, []byte("[program:")) {
			in.programs = append(in.programs, parseSupervisord(f.Name, f.Data)...)
		}
		return nil
	}
	objs, errs := f.Parse()
	in.Objects = append(in.Objects, objs...)
	return errs
}
