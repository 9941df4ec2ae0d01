package lint

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDockerfileProcess(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		text     string
		want     []string
		wantLine int
	}{
		{name: "none", text: "FROM scratch\nCOPY web /\n", want: nil},
		{name: "no stage", text: "CMD [\"web\"]\n", want: nil},
		{name: "shell form", text: "FROM alpine\nCMD web --port 80\n", want: []string{"/bin/sh", "-c", "web --port 80"}, wantLine: 2},
		{name: "exec form", text: "FROM alpine\nCMD [\"web\", \"--port\", \"80\"]\n", want: []string{"web", "--port", "80"}, wantLine: 2},
		{name: "lower-case keyword", text: "from alpine\ncmd [\"web\"]\n", want: []string{"web"}, wantLine: 2},
		{name: "invalid JSON is shell form", text: "FROM alpine\nCMD [web]\n", want: []string{"/bin/sh", "-c", "[web]"}, wantLine: 2},
		{name: "entrypoint takes cmd as arguments", text: "FROM alpine\nENTRYPOINT [\"web\"]\nCMD [\"--port\", \"80\"]\n", want: []string{"web", "--port", "80"}, wantLine: 2},
		{name: "shell-form entrypoint ignores cmd", text: "FROM alpine\nCMD [\"--port\"]\nENTRYPOINT web\n", want: []string{"/bin/sh", "-c", "web"}, wantLine: 3},
		{name: "entrypoint resets inherited cmd", text: "FROM alpine AS a\nCMD [\"x\"]\nFROM a\nENTRYPOINT [\"web\"]\n", want: []string{"web"}, wantLine: 4},
		{name: "entrypoint keeps the stage's own cmd", text: "FROM alpine\nCMD [\"x\"]\nENTRYPOINT [\"web\"]\n", want: []string{"web", "x"}, wantLine: 3},
		{name: "last stage only", text: "FROM alpine AS build\nCMD make\nFROM scratch\n", want: nil},
		{name: "shell instruction", text: "FROM alpine\nSHELL [\"/bin/bash\", \"-ec\"]\nCMD web\n", want: []string{"/bin/bash", "-ec", "web"}, wantLine: 3},
		{name: "continuation and comment", text: "FROM alpine\nCMD web \\\n# a comment\n  --port 80\n", want: []string{"/bin/sh", "-c", "web  --port 80"}, wantLine: 2},
		{name: "escape directive", text: "# escape=`\nFROM alpine\nCMD web `\n  --port 80\n", want: []string{"/bin/sh", "-c", "web  --port 80"}, wantLine: 3},
		{name: "here-document body", text: "FROM alpine\nRUN <<EOF\nCMD x\nEOF\nCMD [\"web\"]\n", want: []string{"web"}, wantLine: 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			argv, in := parseDockerfile("Dockerfile", []byte(tt.text)).process()
			if diff := cmp.Diff(tt.want, argv); diff != "" {
				t.Errorf("process() argv mismatch (-want +got):\n%s", diff)
			}
			line := 0
			if in != nil {
				line = in.line
			}
			if line != tt.wantLine {
				t.Errorf("process() line = %d, want %d", line, tt.wantLine)
			}
		})
	}
}

func TestSplitWords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{in: "", want: nil},
		{in: "python  server.py", want: []string{"python", "server.py"}},
		{in: `bash -c "cd /app && exec python server.py"`, want: []string{"bash", "-c", "cd /app && exec python server.py"}},
		{in: `sh -c 'echo "hi"'`, want: []string{"sh", "-c", `echo "hi"`}},
		{in: `a\ b "c\"d" ''`, want: []string{"a b", `c"d`, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			if diff := cmp.Diff(tt.want, splitWords(tt.in)); diff != "" {
				t.Errorf("splitWords(%q) mismatch (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
