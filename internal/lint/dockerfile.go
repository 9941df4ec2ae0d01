package lint

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
)

// IsDockerfileName reports whether a file of this name, given or found in
// a directory, is read as a Dockerfile, in any case: Dockerfile and
// Containerfile; a variant with a suffix, as docker build -f and hadolint
// take them (Dockerfile.prod, Containerfile.dev); or a name ending in
// .Dockerfile or .Containerfile (api.Dockerfile). A Dockerfile's own
// ignore file (Dockerfile.dockerignore, build.Dockerfile.dockerignore) is
// not one.
func IsDockerfileName(name string) bool {
	base := strings.ToLower(filepath.Base(name))
	if strings.HasSuffix(base, ".dockerignore") {
		return false
	}
	for _, n := range []string{"dockerfile", "containerfile"} {
		if base == n || strings.HasPrefix(base, n+".") || strings.HasSuffix(base, "."+n) {
			return true
		}
	}
	return false
}

// dockerfile is what a Dockerfile says about the container's first
// process: its final stage's ENTRYPOINT, CMD and SHELL, with those
// inherited from an earlier stage it is built FROM.
type dockerfile struct {
	entrypoint, cmd *instruction
	shell           []string // for shell form; nil means ["/bin/sh", "-c"]
}

// instruction is one CMD, ENTRYPOINT or SHELL, and a subject of findings.
type instruction struct {
	file, stage string // stage is the name of the stage that has it, or ""
	line        int
	keyword     string   // "CMD" or "ENTRYPOINT"
	exec        []string // the exec (JSON) form; nil for shell form
	shell       string   // the shell form
	ignore      string   // rule IDs of a "# closingtime ignore=" comment just above
}

func (in *instruction) String() string {
	if in.stage != "" {
		return "Dockerfile stage " + in.stage
	}
	return "Dockerfile"
}

func (in *instruction) position(string) (string, int) { return in.file, in.line }
func (in *instruction) ignores(rule string) bool      { return listed(in.ignore, rule) }

// dockerIgnore matches a comment that suppresses rules for the next
// instruction, as hadolint's "# hadolint ignore=" does.
var dockerIgnore = regexp.MustCompile(`^#\s*closingtime\s+ignore=(\S+)`)

// escapeDirective matches the parser directive that changes the escape
// character.
var escapeDirective = regexp.MustCompile(`^#\s*escape\s*=\s*(\S)`)

// heredoc matches the start of a here-document in an instruction
// (RUN <<EOF, COPY <<-"EOF" file).
var heredoc = regexp.MustCompile(`<<-?\s*["']?([A-Za-z_][A-Za-z0-9_]*)["']?`)

// parseDockerfile reads the instructions of a Dockerfile that decide its
// container's first process. It follows the Dockerfile reference
// (https://docs.docker.com/reference/dockerfile/): the escape parser
// directive, line continuations, comments, here-documents, stages, and
// ENTRYPOINT resetting a CMD that the stage did not set itself. A line it
// does not understand is skipped: the build, not the linter, reports it.
func parseDockerfile(file string, data []byte) *dockerfile {
	type stage struct {
		name   string
		d      dockerfile
		cmdSet bool
	}
	var stages []*stage
	var cur *stage
	escape := `\`
	lines := strings.Split(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n")
	pendingIgnore := ""
	directives := true
	for i := 0; i < len(lines); i++ {
		start := i
		line := strings.TrimSpace(lines[i])
		if strings.HasPrefix(line, "#") {
			if directives {
				if m := escapeDirective.FindStringSubmatch(line); m != nil {
					escape = m[1]
					continue
				}
			}
			if m := dockerIgnore.FindStringSubmatch(line); m != nil {
				pendingIgnore = m[1]
			}
			continue
		}
		if line == "" {
			continue
		}
		directives = false
		// Join continuation lines; comment lines inside are dropped.
		for strings.HasSuffix(line, escape) && i+1 < len(lines) {
			line = strings.TrimSuffix(line, escape)
			for i+1 < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[i+1]), "#") {
				i++
			}
			if i+1 < len(lines) {
				i++
				line += " " + strings.TrimSpace(lines[i])
			}
		}
		keyword, args, _ := strings.Cut(line, " ")
		keyword, args = strings.ToUpper(keyword), strings.TrimSpace(args)
		// Skip the bodies of here-documents.
		for _, m := range heredocs(keyword, args) {
			for i+1 < len(lines) {
				i++
				if strings.TrimSpace(lines[i]) == m[1] {
					break
				}
			}
		}
		ignore := pendingIgnore
		pendingIgnore = ""
		switch keyword {
		case "FROM":
			fields := strings.Fields(args)
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				fields = fields[1:]
			}
			s := &stage{}
			if len(fields) >= 3 && strings.EqualFold(fields[1], "as") {
				s.name = fields[2]
			}
			if len(fields) > 0 {
				for _, prev := range stages {
					if prev.name != "" && strings.EqualFold(prev.name, fields[0]) {
						s.d = prev.d
					}
				}
			}
			stages = append(stages, s)
			cur = s
		case "CMD", "ENTRYPOINT", "SHELL":
			if cur == nil {
				continue
			}
			in := &instruction{file: file, stage: cur.name, line: start + 1, keyword: keyword, ignore: ignore}
			var argv []string
			if strings.HasPrefix(args, "[") && json.Unmarshal([]byte(args), &argv) == nil {
				in.exec = argv
				if in.exec == nil {
					in.exec = []string{}
				}
			} else {
				in.shell = args
			}
			switch keyword {
			case "SHELL":
				cur.d.shell = in.exec
			case "CMD":
				cur.d.cmd, cur.cmdSet = in, true
			case "ENTRYPOINT":
				cur.d.entrypoint = in
				if !cur.cmdSet {
					cur.d.cmd = nil
				}
			}
		}
	}
	if cur == nil {
		return &dockerfile{}
	}
	return &cur.d
}

// heredocs returns the here-documents that an instruction starts, each as
// its submatches of heredoc; only RUN, COPY and ADD take them.
func heredocs(keyword, args string) [][]string {
	switch keyword {
	case "RUN", "COPY", "ADD":
		return heredoc.FindAllStringSubmatch(args, -1)
	}
	return nil
}

// process returns the argument vector of the container's first process
// and the instruction that decides it, or nil when the Dockerfile sets
// neither ENTRYPOINT nor CMD. A shell-form ENTRYPOINT ignores CMD; an
// exec-form one takes CMD as its arguments.
func (d *dockerfile) process() ([]string, *instruction) {
	shellArgv := func(in *instruction) []string {
		if in.exec != nil {
			return in.exec
		}
		sh := d.shell
		if len(sh) == 0 {
			sh = []string{"/bin/sh", "-c"}
		}
		return append(append([]string(nil), sh...), in.shell)
	}
	switch {
	case d.entrypoint != nil && d.entrypoint.exec == nil:
		return shellArgv(d.entrypoint), d.entrypoint
	case d.entrypoint != nil:
		argv := d.entrypoint.exec
		if d.cmd != nil {
			argv = append(append([]string(nil), argv...), shellArgv(d.cmd)...)
		}
		return argv, d.entrypoint
	case d.cmd != nil:
		return shellArgv(d.cmd), d.cmd
	}
	return nil, nil
}
