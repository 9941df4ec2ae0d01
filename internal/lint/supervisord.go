package lint

import (
	"path/filepath"
	"regexp"
	"strings"
)

// IsSupervisordName reports whether a file of this name, found in a
// directory, may be a supervisord configuration: its extension is .conf or
// .ini. Read checks only those with [program:…] sections.
func IsSupervisordName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".conf", ".ini":
		return true
	}
	return false
}

// program is one [program:name] section of a supervisord configuration,
// and a subject of findings.
type program struct {
	file, name string
	line       int                // of the section header
	settings   map[string]setting // by lower-case key
	ignore     string             // rule IDs of a "; closingtime ignore=" comment in the section
	drain      *setting           // a "; closingtime.dev/max-request-seconds: N" comment in the section
	// group is the [group:name] section that lists the program, if one
	// does: supervisord stops its programs together, at its priority.
	group *program
}

// setting is one key's value and line.
type setting struct {
	value string
	line  int
}

func (p *program) String() string { return "supervisord program:" + p.name }

func (p *program) position(key string) (string, int) {
	if s, ok := p.settings[key]; ok {
		return p.file, s.line
	}
	return p.file, p.line
}

func (p *program) ignores(rule string) bool { return listed(p.ignore, rule) }

var (
	// supervisordIgnore and supervisordDrain match the comments that
	// suppress rules and declare the program's drain, in its section.
	supervisordIgnore = regexp.MustCompile(`^[;#]\s*closingtime\s+ignore=(\S+)`)
	supervisordDrain  = regexp.MustCompile(`^[;#]\s*` + regexp.QuoteMeta(MaxRequestSecondsAnnotation) + `\s*[:=]\s*(\S+)`)
	// inlineComment is a comment after a value: a semicolon after
	// whitespace, as supervisord's configuration parser takes it.
	inlineComment = regexp.MustCompile(`\s;.*$`)
)

// parseSupervisord returns the [program:…] sections of a supervisord
// configuration, each with the [group:…] that lists it, read as supervisord's INI parser reads them: "key = value"
// or "key: value", indented continuation lines, comment lines starting
// with ";" or "#", and inline comments after " ;".
func parseSupervisord(file string, data []byte) []*program {
	var programs, groups []*program
	var cur *program
	var last string // the key a continuation line extends
	for n, raw := range strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case line == "":
			last = ""
		case line[0] == ';' || line[0] == '#':
			if cur == nil {
				continue
			}
			if m := supervisordIgnore.FindStringSubmatch(line); m != nil {
				cur.ignore = m[1]
			}
			if m := supervisordDrain.FindStringSubmatch(line); m != nil {
				cur.drain = &setting{value: m[1], line: n + 1}
			}
		case line[0] == '[':
			cur, last = nil, ""
			header := strings.TrimSuffix(line, "]")
			if name, ok := strings.CutPrefix(header, "[program:"); ok {
				cur = &program{file: file, name: strings.TrimSpace(name), line: n + 1, settings: make(map[string]setting)}
				programs = append(programs, cur)
			}
			if name, ok := strings.CutPrefix(header, "[group:"); ok {
				cur = &program{file: file, name: strings.TrimSpace(name), line: n + 1, settings: make(map[string]setting)}
				groups = append(groups, cur)
			}
		case raw[0] == ' ' || raw[0] == '\t':
			if cur != nil && last != "" {
				s := cur.settings[last]
				s.value += " " + strings.TrimSpace(inlineComment.ReplaceAllString(line, ""))
				cur.settings[last] = s
			}
		default:
			if cur == nil {
				continue
			}
			i := strings.IndexAny(line, "=:")
			if i < 0 {
				continue
			}
			last = strings.ToLower(strings.TrimSpace(line[:i]))
			value := strings.TrimSpace(inlineComment.ReplaceAllString(line[i+1:], ""))
			cur.settings[last] = setting{value: value, line: n + 1}
		}
	}
	for _, g := range groups {
		for name := range strings.SplitSeq(g.settings["programs"].value, ",") {
			for _, p := range programs {
				if p.name == strings.TrimSpace(name) {
					p.group = g
				}
			}
		}
	}
	return programs
}
