// Package manifest reads Kubernetes manifests into the official API types
// (k8s.io/api) and remembers where each object and each of its fields was
// written, so that whatever reads a manifest (the linter, the embedded
// cluster, the scenario runner) can point at the line a user has to change.
//
// A manifest is a file of one or more YAML (or JSON) documents separated by
// "---" lines. Each document is one object, or a list of objects (kind: List,
// or any kind ending in "List" with an items field). Values are decoded as
// the API server decodes them under kubectl's default, strict, field
// validation (sigs.k8s.io/yaml to JSON, then sigs.k8s.io/json into k8s.io/api
// structs): keys match field names case-sensitively, and a field that is
// unknown or written twice is an error, not silently dropped. Positions come
// from a second, position-keeping parse of the same text (go.yaml.in/yaml/v3),
// so the two always describe the same document, and an error names the line
// of its field.
//
// A [Reader] reads files and directories as kubectl's -f does, and builds
// kustomizations and renders Helm charts it finds on the way, in process.
// Their objects keep the positions of their sources: a kustomization's, the
// resource file and document kustomize's origin annotation names; a
// chart's, the template that rendered them, at the template's lines that
// the rendered lines were written from (see [Object.Build]). No position
// of a build's object points into the build's output, which no file holds.
//
// Reading never stops at the first problem: a file that cannot be read or a
// document that cannot be decoded is reported as an [*Error] naming the file
// and line, and every other document is still returned.
package manifest
