package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "sigs.k8s.io/json"
	sigsyaml "sigs.k8s.io/yaml"
)

// Object is one Kubernetes object read from a manifest, with where it was
// written. The zero Object has no object and no position.
type Object struct {
	// Obj is the decoded object: a pointer to its k8s.io/api type (for
	// example *appsv1.Deployment) for the kinds of apps/v1, autoscaling/v1,
	// autoscaling/v2, batch/v1, core/v1 and policy/v1, and an
	// *unstructured.Unstructured for any other kind. Its TypeMeta is set.
	Obj runtime.Object
	// File is the name of the file the object was read from, as given to
	// [Parse] or named by [Reader.Read]; for an object of a kustomization's
	// or a chart's output, the file it was written in (see Build).
	File string
	// Line is the 1-based line of the object's first field in File.
	Line int
	// Build is the directory of the kustomization or chart whose output
	// the object is, as [Reader.Read] found it, and "" for an object read
	// from a manifest file. File, Line and [Object.FieldLine] then point
	// into the object's source: the file of the kustomization's resources
	// that holds the object (or the kustomization file that generated
	// it), or the chart's template that rendered it.
	Build string

	// node is the object's YAML mapping, for FieldLine.
	node *yaml.Node
}

// Kind returns the object's kind, such as "Deployment". It, Meta and
// String panic on the zero Object.
func (o Object) Kind() string {
	return o.Obj.GetObjectKind().GroupVersionKind().Kind
}

// Meta returns the object's metadata.
func (o Object) Meta() metav1.Object {
	m, err := meta.Accessor(o.Obj)
	if err != nil {
		// Every type Parse decodes into has ObjectMeta.
		panic(fmt.Sprintf("manifest: %T has no metadata: %v", o.Obj, err))
	}
	return m
}

// String returns the kind, namespace and name, as "Deployment shop/web", or
// "Deployment web" when the manifest names no namespace.
func (o Object) String() string {
	m := o.Meta()
	if ns := m.GetNamespace(); ns != "" {
		return o.Kind() + " " + ns + "/" + m.GetName()
	}
	return o.Kind() + " " + m.GetName()
}

// FieldLine returns the 1-based line of the field at path, or, when the
// manifest does not write that field (a defaulted field, a missing probe),
// the line of its nearest ancestor that it does write; at worst the object's
// own Line. It returns 0 for an Object that was not read from a manifest.
//
// A path is a sequence of field names separated by dots, with list elements
// and keys that contain dots in brackets, as kubectl prints them:
// "spec.template.spec.containers[0].readinessProbe" or
// `metadata.annotations[closingtime.dev/ignore]`. A name applied to a list
// without an index, as in encoding/json's error fields
// ("spec.template.spec.containers.ports"), looks in the first element that
// has it.
func (o Object) FieldLine(path string) int {
	return NodeLine(o.node, path)
}

// NodeLine returns the 1-based line of the field at path in the YAML tree
// n, as [Object.FieldLine] does for an object's mapping: the nearest
// ancestor's line when the field is not written, n's own line at worst, and
// 0 for a nil n. Other YAML files with positions (scenario files) use it.
func NodeLine(n *yaml.Node, path string) int {
	if n == nil {
		return 0
	}
	line := n.Line
	for _, seg := range splitPath(path) {
		n = resolveAlias(n)
		var next, at *yaml.Node
		switch n.Kind {
		case yaml.MappingNode:
			at, next = mappingValue(n, seg)
		case yaml.SequenceNode:
			if i, err := strconv.Atoi(seg); err == nil {
				if i >= 0 && i < len(n.Content) {
					at, next = n.Content[i], n.Content[i]
				}
				break
			}
			// A name applied to a list, as in encoding/json's error
			// fields: the first element that has it.
			for _, el := range n.Content {
				if k, v := mappingValue(resolveAlias(el), seg); v != nil {
					at, next = k, v
					break
				}
			}
		}
		if next == nil {
			return line
		}
		n, line = next, at.Line
	}
	return line
}

// mappingValue returns the key and value nodes of key in mapping n, or
// nils.
func mappingValue(n *yaml.Node, key string) (k, v *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

// splitPath splits a field path into its names and bracketed elements.
func splitPath(path string) []string {
	var segs []string
	for path != "" {
		switch {
		case path[0] == '.':
			path = path[1:]
		case path[0] == '[':
			end := strings.IndexByte(path, ']')
			if end < 0 {
				return append(segs, path[1:])
			}
			segs = append(segs, path[1:end])
			path = path[end+1:]
		default:
			end := strings.IndexAny(path, ".[")
			if end < 0 {
				end = len(path)
			}
			segs = append(segs, path[:end])
			path = path[end:]
		}
	}
	return segs
}

// maxAliasDepth bounds how many aliases FieldLine follows in a row, so that
// an alias cycle in hostile input cannot loop.
const maxAliasDepth = 16

func resolveAlias(n *yaml.Node) *yaml.Node {
	for i := 0; i < maxAliasDepth && n.Kind == yaml.AliasNode && n.Alias != nil; i++ {
		n = n.Alias
	}
	return n
}

// Error is a problem with one input: a file that cannot be read, or a
// document that cannot be decoded. Other documents and files are unaffected.
type Error struct {
	// File is the file's name, as given to Parse or named by Reader.Read.
	File string
	// Line is the 1-based line of the problem, or 0 when it concerns the
	// file as a whole.
	Line int
	// Err is the reason.
	Err error
}

func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
	}
	return fmt.Sprintf("%s: %v", e.File, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNoKind reports a document that is not a Kubernetes object: it lacks
// apiVersion or kind.
var ErrNoKind = errors.New("not a Kubernetes object: apiVersion and kind are required")

// objectKeys are the top-level keys of a Kubernetes object that
// [HoldsObject] looks for; its metadata too, for an object whose
// apiVersion and kind are both missing or misspelt.
var objectKeys = []string{"apiVersion", "kind", "metadata"}

// objectKey matches an objectKeys key written as YAML or JSON, in a
// document that is not valid YAML.
var objectKey = regexp.MustCompile(`(?i)(^|[\s{,"'])(apiVersion|kind|metadata)["']?\s*:`)

// HoldsObject reports whether data, a file's content, holds Kubernetes
// objects or is meant to: one of its documents is a mapping (or a
// sequence of mappings) with an apiVersion, kind or metadata key, in any
// case, or is not valid YAML and writes one of those keys. A file of
// which it reports false, such as a package.json, a Helm values file or
// the results of closingtime rollout, is not a manifest at all; one of
// which it reports true is, and [Parse] reports each of its mistakes.
func HoldsObject(data []byte) bool {
	for _, doc := range splitDocuments(data) {
		var root yaml.Node
		if err := yaml.Unmarshal(doc.text, &root); err != nil {
			if objectKey.Match(doc.text) {
				return true
			}
			continue
		}
		if len(root.Content) == 0 {
			continue
		}
		n := resolveAlias(root.Content[0])
		tops := []*yaml.Node{n}
		if n.Kind == yaml.SequenceNode {
			tops = n.Content
		}
		for _, top := range tops {
			if top = resolveAlias(top); top.Kind != yaml.MappingNode {
				continue
			}
			for i := 0; i+1 < len(top.Content); i += 2 {
				if slices.ContainsFunc(objectKeys, func(k string) bool { return strings.EqualFold(k, top.Content[i].Value) }) {
					return true
				}
			}
		}
	}
	return false
}

// scheme holds the types Parse decodes into; it is only read after init.
var scheme = newScheme()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme,
		autoscalingv1.AddToScheme,
		autoscalingv2.AddToScheme,
		batchv1.AddToScheme,
		corev1.AddToScheme,
		policyv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(fmt.Sprintf("manifest: register API types: %v", err))
		}
	}
	return s
}

// kindsOf returns the kinds of objects that scheme registers for gv, sorted,
// without their lists.
func kindsOf(gv schema.GroupVersion) []string {
	var kinds []string
	for kind := range scheme.KnownTypes(gv) {
		obj, err := scheme.New(gv.WithKind(kind))
		if err != nil || strings.HasSuffix(kind, "List") {
			continue
		}
		if _, err := meta.Accessor(obj); err == nil {
			kinds = append(kinds, kind)
		}
	}
	slices.Sort(kinds)
	return kinds
}

// Parse decodes the documents of one manifest file. file names it in
// positions and errors. It returns every object it could decode, in the
// order they appear, and an [*Error] for each problem in a document it could
// not; it never stops at the first problem. Empty documents (blank or
// comments only) are skipped.
//
// Parse is as strict as kubectl's default field validation (the API
// server's "Strict"): a field written twice in a mapping, or a field that an
// object's k8s.io/api type does not have (readinesProbe for readinessProbe,
// replica for replicas, Replicas in the wrong case), rejects its object:
// Parse does not return it, and returns an error for each such field, at
// the field's line and naming its path as the API server does: `unknown
// field "spec.template.spec.containers[0].readinesProbe"`. The fields of an
// object of a kind without a k8s.io/api type (a custom resource) are not
// checked, as kubectl leaves them to the resource's schema on the server;
// but a kind that a built-in group version lacks (apps/v1 Deploymnet) is
// an error at its line, listing the kinds it has.
func Parse(file string, data []byte) ([]Object, []error) {
	return parseDocuments(file, splitDocuments(data))
}

// parseDocuments decodes docs, the documents of file, as Parse does.
func parseDocuments(file string, docs []document) ([]Object, []error) {
	var objs []Object
	var errs []error
	for _, doc := range docs {
		o, err := parseDocument(file, doc)
		objs = append(objs, o...)
		errs = append(errs, err...)
	}
	return objs, errs
}

// document is one YAML document of a file and the number of lines before it.
type document struct {
	text   []byte
	offset int
	// src, for a document of a kustomization's or a chart's output, is
	// where it was written; nil for a file's.
	src *source
}

// splitDocuments cuts data at each "---" line, so that a broken document
// does not hide the ones after it, as it would in a single YAML stream.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 0, 0
	for pos := 0; pos < len(data); line++ {
		end := bytes.IndexByte(data[pos:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += pos + 1
		}
		if pos > start && isSeparator(data[pos:end]) {
			docs = append(docs, document{text: data[start:pos], offset: startLine})
			start, startLine = pos, line
		}
		pos = end
	}
	return append(docs, document{text: data[start:], offset: startLine})
}

func isSeparator(line []byte) bool {
	if !bytes.HasPrefix(line, []byte("---")) {
		return false
	}
	return len(line) == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\n' || line[3] == '\r'
}

// yamlLine matches the position that go.yaml.in/yaml/v3 puts in the text of
// its syntax errors.
var yamlLine = regexp.MustCompile(`^yaml: (line \d+: )?`)

// syntaxError returns err, go.yaml.in/yaml/v3's error for doc, as an *Error
// at the line of the mistake in the file. In a chart's rendered template,
// that is the template's line the mistake is a copy of; when it is a copy
// of none, the error names the template and the line as rendered.
func syntaxError(file string, doc document, err error) *Error {
	line, msg := doc.offset+mistakeLine(doc.text, err), yamlLine.ReplaceAllString(err.Error(), "")
	if doc.src != nil {
		file = doc.src.file
		if m := doc.src.line(line); m > 0 {
			line = m
		} else {
			line, msg = 0, fmt.Sprintf("line %d as rendered: %s", line, msg)
		}
	}
	return &Error{File: file, Line: line, Err: errors.New(msg)}
}

// mistakeLine returns the 1-based line of text that the syntax error err,
// go.yaml.in/yaml/v3's for text, is about. The line in err's text is often
// not it: for an error of its parser rather than its scanner, yaml.v3
// prints the 0-based line of the error's context if it has one, else of
// the token it did not expect (decode.go, parser.fail), so a key indented
// one space too little is reported on the line above it, and an entry
// missing its "-" on the line above its sequence. The mistake is instead on
// the first line at which the text up to and including it fails with the
// same error: the parser sees the same tokens up to the one it rejects,
// and a text that ends before that line parses or fails otherwise.
func mistakeLine(text []byte, err error) int {
	var ends []int // the end of each line, after its newline
	for i, c := range text {
		if c == '\n' {
			ends = append(ends, i+1)
		}
	}
	if len(ends) == 0 || ends[len(ends)-1] < len(text) {
		ends = append(ends, len(text))
	}
	want := err.Error()
	return 1 + sort.Search(len(ends), func(i int) bool {
		var n yaml.Node
		err := yaml.Unmarshal(text[:ends[i]], &n)
		return err != nil && err.Error() == want
	})
}

func parseDocument(file string, doc document) ([]Object, []error) {
	var root yaml.Node
	if err := yaml.Unmarshal(doc.text, &root); err != nil {
		return nil, []error{syntaxError(file, doc, err)}
	}
	if root.Kind == 0 || len(root.Content) == 0 || root.Content[0].Tag == "!!null" {
		return nil, nil // blank, comments only, or an explicit null
	}
	shiftLines(&root, doc.offset)
	n := root.Content[0]
	if doc.src != nil {
		// Positions from where the object was written.
		file, n = doc.src.file, doc.src.place(n, doc)
	}
	if err := checkKeys(n, ""); err != nil {
		return nil, []error{&Error{File: file, Line: err.line, Err: err}}
	}
	if n.Kind != yaml.MappingNode {
		return nil, []error{&Error{File: file, Line: n.Line, Err: ErrNoKind}}
	}
	data, err := sigsyaml.YAMLToJSON(doc.text)
	if err != nil {
		return nil, []error{&Error{File: file, Line: n.Line, Err: err}}
	}
	var list struct {
		metav1.TypeMeta
		Items []json.RawMessage `json:"items"`
	}
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &list); err == nil && strings.HasSuffix(list.Kind, "List") {
		return parseList(file, n, list.Items)
	}
	o, errs := decode(file, n, data)
	if len(errs) > 0 {
		return nil, errs
	}
	return []Object{o}, nil
}

// parseList decodes the raw items of the list document whose YAML mapping is
// n; n's items sequence holds the items' positions.
func parseList(file string, n *yaml.Node, raw []json.RawMessage) ([]Object, []error) {
	_, items := mappingValue(n, "items")
	if items != nil {
		items = resolveAlias(items)
	}
	var objs []Object
	var errs []error
	for i, data := range raw {
		in := n
		if items != nil && items.Kind == yaml.SequenceNode && i < len(items.Content) {
			in = resolveAlias(items.Content[i])
		}
		o, err := decode(file, in, data)
		if len(err) > 0 {
			errs = append(errs, err...)
			continue
		}
		objs = append(objs, o)
	}
	return objs, errs
}

// decode decodes one object's JSON into its k8s.io/api type, strictly;
// n is its YAML mapping. It returns the object, or the errors that reject
// it.
func decode(file string, n *yaml.Node, data []byte) (Object, []error) {
	o := Object{File: file, Line: n.Line, node: n}
	fail := func(line int, err error) (Object, []error) {
		return o, []error{&Error{File: file, Line: line, Err: err}}
	}
	var tm metav1.TypeMeta
	if err := kjson.UnmarshalCaseSensitivePreserveInts(data, &tm); err != nil {
		return fail(n.Line, fmt.Errorf("apiVersion, kind: %w", err))
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return fail(n.Line, ErrNoKind)
	}
	gv, err := schema.ParseGroupVersion(tm.APIVersion)
	if err != nil {
		return fail(o.FieldLine("apiVersion"), err)
	}
	obj, err := scheme.New(gv.WithKind(tm.Kind))
	if err != nil {
		// A group version whose types are all registered has no other
		// kinds: a kind it lacks is a mistake, not a custom resource.
		if scheme.IsVersionRegistered(gv) {
			return fail(o.FieldLine("kind"), fmt.Errorf("%s has no kind %q; its kinds: %s", tm.APIVersion, tm.Kind, strings.Join(kindsOf(gv), ", ")))
		}
		obj = &unstructured.Unstructured{}
	}
	// The API server's decoding: keys match field names case-sensitively,
	// and unknown fields are reported, not dropped. An Unstructured decodes
	// itself and reports none.
	strict, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowUnknownFields)
	if err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fail(o.FieldLine(te.Field), fmt.Errorf("%s: cannot decode %s into %s", te.Field, te.Value, te.Type))
		}
		return fail(n.Line, fmt.Errorf("%s %s: %w", tm.APIVersion, tm.Kind, err))
	}
	if _, err := meta.Accessor(obj); err != nil {
		// The scheme also knows kinds that are not stored objects, such as Status.
		return fail(o.FieldLine("kind"), fmt.Errorf("%s %s is not an object with metadata", tm.APIVersion, tm.Kind))
	}
	if len(strict) > 0 {
		return o, fieldErrors(o, strict)
	}
	// Decoding into a typed object drops nothing of TypeMeta, but
	// set it explicitly so Kind works whatever the type's decoder does.
	obj.GetObjectKind().SetGroupVersionKind(gv.WithKind(tm.Kind))
	o.Obj = obj
	return o, nil
}

// fieldErrors returns sigs.k8s.io/json's strict errors about o as *Errors
// at their fields' lines. Their text (`unknown field "spec.replica"`) is
// the API server's. sigs.k8s.io/yaml sorts the keys of the JSON it makes,
// so the errors are sorted back into the file's order of lines.
func fieldErrors(o Object, strict []error) []error {
	errs := make([]error, len(strict))
	for i, err := range strict {
		line := o.Line
		if fe, ok := err.(kjson.FieldError); ok {
			line = o.FieldLine(fe.FieldPath())
		}
		errs[i] = &Error{File: o.File, Line: line, Err: err}
	}
	slices.SortStableFunc(errs, func(a, b error) int { return a.(*Error).Line - b.(*Error).Line })
	return errs
}

// duplicateFieldError reports a mapping key written twice. sigs.k8s.io/yaml
// keeps the last value silently, which would leave FieldLine pointing at the
// first; kubectl's field validation rejects such objects too, with
// "duplicate field" and the field's path.
type duplicateFieldError struct {
	path        string
	line, first int
}

func (e *duplicateFieldError) Error() string {
	return fmt.Sprintf("duplicate field %q, first written at line %d", e.path, e.first)
}

// checkKeys returns a *duplicateFieldError for the first mapping under n,
// the value at path, that has a key twice. Aliases are not followed: their
// targets are checked where they are defined.
func checkKeys(n *yaml.Node, path string) *duplicateFieldError {
	switch n.Kind {
	case yaml.MappingNode:
		seen := make(map[string]int, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Value == "<<" {
				continue
			}
			if first, ok := seen[k.Value]; ok {
				return &duplicateFieldError{path: joinPath(path, k.Value), line: k.Line, first: first}
			}
			seen[k.Value] = k.Line
			if err := checkKeys(n.Content[i+1], joinPath(path, k.Value)); err != nil {
				return err
			}
		}
		return nil
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := checkKeys(c, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
		return nil
	}
	for _, c := range n.Content {
		if err := checkKeys(c, path); err != nil {
			return err
		}
	}
	return nil
}

// joinPath appends the field name to path as [Object.FieldLine] reads it:
// after a dot, or in brackets when it holds a dot or a bracket.
func joinPath(path, name string) string {
	if strings.ContainsAny(name, ".[") {
		return path + "[" + name + "]"
	}
	if path == "" {
		return name
	}
	return path + "." + name
}

// shiftLines adds offset to the line of every node under n, so that lines
// count from the top of the file rather than of the document. Aliased
// nodes are shifted once, where they are defined.
func shiftLines(n *yaml.Node, offset int) {
	if offset == 0 {
		return
	}
	n.Line += offset
	for _, c := range n.Content {
		shiftLines(c, offset)
	}
}
