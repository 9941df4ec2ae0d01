package manifest

import (
	"bytes"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// source is where a document of a kustomization's or a chart's output was
// written, for the positions of its object and errors.
type source struct {
	// file is the source file, named as the Reader found it.
	file string
	// node, when set, is the object's tree in file (a kustomization's
	// source document), whose lines are the object's.
	node *yaml.Node
	// lines, when node is nil, maps the output's lines to file's (a chart's
	// rendered template to the template): lines[i] is the line of file
	// that line i+1 of the output is a copy of, 0 when none is.
	lines []int
}

// place returns the tree to take the positions of an object from: the
// output's tree n, the object of doc, with its lines replaced by file's, or
// the source document's tree.
//
// A line of the output that is a copy of none of file's takes the line of
// its nearest ancestor that is (a value written by a template function
// takes its key's line, a key that an include wrote its mapping's), and
// the object, when its first line is not, the first of its lines that
// is, or else file's first line.
func (s *source) place(n *yaml.Node, doc document) *yaml.Node {
	if s.node != nil {
		return s.node
	}
	first := 1
	for l := n.Line; l <= doc.offset+bytes.Count(doc.text, []byte("\n"))+1; l++ {
		if m := s.line(l); m > 0 {
			first = m
			break
		}
	}
	s.remap(n, first)
	return n
}

// line returns the line of file that line l of the output is a copy of,
// or 0.
func (s *source) line(l int) int {
	if l < 1 || l > len(s.lines) {
		return 0
	}
	return s.lines[l-1]
}

// remap replaces the output's lines of n and the nodes under it with
// file's, fallback for those that are a copy of none; a mapping's value
// falls back on its key, anything else on its parent.
func (s *source) remap(n *yaml.Node, fallback int) {
	if n.Kind == yaml.AliasNode {
		return // its target is remapped where it is defined
	}
	if m := s.line(n.Line); m > 0 {
		n.Line = m
	} else {
		n.Line = fallback
	}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			s.remap(n.Content[i], n.Line)
			s.remap(n.Content[i+1], n.Content[i].Line)
		}
		return
	}
	for _, c := range n.Content {
		s.remap(c, n.Line)
	}
}

// alignLines returns, for each line of out, a chart's rendered template,
// the 1-based line of in, its template, that it was rendered from, or 0:
// the longest common subsequence of their lines, where a line of the
// template matches a rendered line as [templateLine.matches] says.
func alignLines(out, in []byte) []int {
	a := textLines(out)
	b := make([]templateLine, 0, len(a))
	for _, l := range textLines(in) {
		b = append(b, parseTemplateLine(l))
	}
	same := func(i, j int) bool { return b[j].matches(a[i]) }
	lines := make([]int, len(a))
	// The lines before the first difference and after the last match
	// without a table.
	lo := 0
	for lo < len(a) && lo < len(b) && same(lo, lo) {
		lines[lo] = lo + 1
		lo++
	}
	ha, hb := len(a), len(b)
	for ha > lo && hb > lo && same(ha-1, hb-1) {
		ha, hb = ha-1, hb-1
		lines[ha] = hb + 1
	}
	n, m := ha-lo, hb-lo
	if n == 0 || m == 0 || n*m > maxAlignCells {
		return lines
	}
	// l[i*(m+1)+j] is the length of the longest common subsequence of
	// a[lo+i:ha] and b[lo+j:hb].
	l := make([]int32, (n+1)*(m+1))
	at := func(i, j int) int32 { return l[i*(m+1)+j] }
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if same(lo+i, lo+j) {
				l[i*(m+1)+j] = at(i+1, j+1) + 1
			} else {
				l[i*(m+1)+j] = max(at(i+1, j), at(i, j+1))
			}
		}
	}
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case same(lo+i, lo+j) && at(i, j) == at(i+1, j+1)+1:
			lines[lo+i] = lo + j + 1
			i, j = i+1, j+1
		case at(i+1, j) >= at(i, j+1):
			i++
		default:
			j++
		}
	}
	return lines
}

// maxAlignCells bounds the table alignLines fills for the lines between
// the first and the last difference, 16 MiB; beyond it, only the lines
// before and after them are aligned.
const maxAlignCells = 4 << 20

// textLines splits text into lines without their trailing blanks.
func textLines(text []byte) []string {
	lines := strings.Split(strings.TrimSuffix(string(text), "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return lines
}

// templateLine is one line of a Helm template: the literal text around
// its actions ({{ … }}), in order, as the rendered line holds it.
type templateLine struct {
	parts []string
	// actions reports whether the line has actions, whose output is not
	// known: anything may stand between its parts.
	actions bool
}

// parseTemplateLine splits a template's line at its actions. The trim
// markers of an action ("{{- ", " -}}") remove the blanks beside it from
// the literal text, as the template engine removes them from the output.
// A line with an action that it does not close has no parts: it matches
// nothing.
func parseTemplateLine(l string) templateLine {
	var t templateLine
	trimLeft := false
	for {
		open := strings.Index(l, "{{")
		lit := l
		if open >= 0 {
			lit = l[:open]
		}
		if trimLeft {
			lit = strings.TrimLeft(lit, " \t")
		}
		if open < 0 {
			t.parts = append(t.parts, lit)
			return t
		}
		action := l[open:]
		end := strings.Index(action, "}}")
		if end < 0 {
			return templateLine{actions: true}
		}
		if strings.HasPrefix(action, "{{- ") {
			lit = strings.TrimRight(lit, " \t")
		}
		trimLeft = strings.HasSuffix(action[:end], " -")
		t.parts, t.actions = append(t.parts, lit), true
		l = action[end+2:]
	}
}

// matches reports whether the rendered line r can have been rendered from
// t: it is t's text, for a line without actions, or it holds t's literal
// parts in order, from its start to its end, for a line with some. A blank
// line, and a line whose actions stand alone ({{- if … }}, {{ end }},
// {{ toYaml … | nindent 8 }}), match nothing: they hold no text of their
// own.
func (t templateLine) matches(r string) bool {
	if !t.actions {
		return len(t.parts) == 1 && r != "" && r == t.parts[0]
	}
	if strings.TrimSpace(strings.Join(t.parts, "")) == "" {
		return false
	}
	first, last := t.parts[0], t.parts[len(t.parts)-1]
	rest, ok := strings.CutPrefix(r, first)
	if !ok {
		return false
	}
	for _, p := range t.parts[1 : len(t.parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return strings.HasSuffix(rest, last)
}

// sourceFiles reads the source files of a build once each, as the trees
// of the objects they write.
type sourceFiles map[string][]*yaml.Node

// objects returns the trees of the objects of file, in order: each
// document's, and each item of a List's; none when file cannot be read.
func (s sourceFiles) objects(file string) []*yaml.Node {
	if objs, ok := s[file]; ok {
		return objs
	}
	data, err := os.ReadFile(file)
	var objs []*yaml.Node
	if err == nil {
		for _, doc := range splitDocuments(data) {
			var root yaml.Node
			if yaml.Unmarshal(doc.text, &root) != nil || len(root.Content) == 0 {
				continue
			}
			shiftLines(&root, doc.offset)
			n := resolveAlias(root.Content[0])
			objs = append(objs, n)
			if _, items := mappingValue(n, "items"); items != nil && items.Kind == yaml.SequenceNode && strings.HasSuffix(scalar(n, "kind"), "List") {
				for _, item := range items.Content {
					objs = append(objs, resolveAlias(item))
				}
			}
		}
	}
	s[file] = objs
	return objs
}

// find returns the tree of the object of file that became the object of
// a build with kind, namespace and name, or nil. The build may have added
// a prefix and a suffix to its name (namePrefix, nameSuffix) and replaced
// its namespace, and it records neither, so of the objects of that kind,
// it is the one with that name or else the one whose name is the longest
// part of that name; of several alike, the one in namespace, an unset
// namespace and "default" being alike.
func (s sourceFiles) find(file, kind, namespace, name string) *yaml.Node {
	var found *yaml.Node
	best := -1
	for _, n := range s.objects(file) {
		own := scalar(n, "metadata", "name")
		if scalar(n, "kind") != kind || own == "" || !strings.Contains(name, own) {
			continue
		}
		score := 4 * len(own)
		if own == name {
			score += 2
		}
		if sameNamespace(scalar(n, "metadata", "namespace"), namespace) {
			score++
		}
		if score > best {
			found, best = n, score
		}
	}
	return found
}

// at returns a tree at the line of key in file's first object, its first
// line if it has no such key: the position of objects that file
// configured but does not write, such as a kustomization's generated
// ones.
func (s sourceFiles) at(file, key string) *yaml.Node {
	line := 1
	if objs := s.objects(file); len(objs) > 0 {
		line = NodeLine(objs[0], key)
	}
	return &yaml.Node{Kind: yaml.MappingNode, Line: line}
}

// scalar returns the value of the scalar at the keys under mapping n, or
// "".
func scalar(n *yaml.Node, keys ...string) string {
	for _, k := range keys {
		if _, n = mappingValue(resolveAlias(n), k); n == nil {
			return ""
		}
	}
	if n = resolveAlias(n); n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// sameNamespace reports whether two namespaces of an object are the same,
// an unset one being "default", as kubectl creates it there.
func sameNamespace(a, b string) bool {
	unset := func(ns string) bool { return ns == "" || ns == "default" }
	return a == b || unset(a) && unset(b)
}
