package scenario

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/load"
)

// TestReadFile reads every testdata/valid-*.yaml, which must parse, and
// every invalid-*.yaml, whose errors must match its .golden file.
func TestReadFile(t *testing.T) {
	files, err := filepath.Glob("testdata/*-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		valid := strings.HasPrefix(name, "valid-")
		if !valid && !strings.HasPrefix(name, "invalid-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := ReadFile(file)
			if valid {
				if err != nil {
					t.Fatalf("ReadFile() = %v, want no error", err)
				}
				if len(s.Objects) == 0 {
					t.Errorf("no workload objects")
				}
				return
			}
			if err == nil {
				t.Fatal("ReadFile() succeeded, want errors")
			}
			golden.Check(t, strings.TrimSuffix(file, ".yaml")+".golden", []byte(err.Error()+"\n"))
		})
	}
}

// TestParseDefaults checks the settings of a scenario that sets few, and
// of a quick run of one that has quick settings.
func TestParseDefaults(t *testing.T) {
	inline, err := ReadFile("testdata/valid-inline.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files, err := ReadFile("testdata/valid-files.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The clients' kinds decode from their names.
	if want := []Client{{Kind: load.NewConn, Rate: 20}, {Kind: load.KeepAlive, Rate: 10, Connections: 2}}; !slices.Equal(files.Traffic.Clients, want) {
		t.Errorf("clients %+v, want %+v", files.Traffic.Clients, want)
	}
	tests := []struct {
		name  string
		s     *Scenario
		quick bool
		want  settings
	}{
		{name: "defaults", s: inline, want: settings{repetitions: DefaultRepetitions, warmUp: DefaultWarmUp, after: DefaultAfter, settle: DefaultSettle, rl: DefaultRunLimit}},
		{name: "set", s: files, want: settings{description: files.Description, repetitions: 2, warmUp: 1e9, after: 2e9, settle: 3e9, rl: 60e9}},
		{name: "quick", s: files, quick: true, want: settings{description: files.Description, repetitions: 1, warmUp: 1e9, after: 2e9, settle: 3e9, rl: 60e9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Runner{cfg: RunnerConfig{Quick: tt.quick}}
			if got := r.settings(tt.s); got != tt.want {
				t.Errorf("settings = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestFromManifestsErrors checks the errors of the scenario of
// `closingtime rollout`: each names the field that the command line sets,
// and the manifests' paths where a scenario file says "the workload".
func TestFromManifestsErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	api := filepath.Join(dir, "api.yaml")
	if err := os.WriteFile(api, []byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: api\nspec:\n  selector:\n    app: web\n  ports:\n  - port: 81\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	deployment := filepath.Join(dir, "deployment.yaml")
	data, err := os.ReadFile("testdata/deploy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	only, _, _ := bytes.Cut(data, []byte("---"))
	if err := os.WriteFile(deployment, only, 0o644); err != nil {
		t.Fatal(err)
	}
	const deploy = "testdata/deploy.yaml"
	tests := []struct {
		name      string
		paths     []string
		traffic   Traffic
		wantField string
		wantErr   string
	}{
		{name: "no such Service", paths: []string{deploy}, traffic: Traffic{Service: "nope"},
			wantField: "traffic.service", wantErr: `no Service "nope" in testdata/deploy.yaml; Services: web`},
		{name: "several Services", paths: []string{deploy, api},
			wantField: "traffic.service", wantErr: "2 Services (web, api): name one"},
		{name: "no Service", paths: []string{deployment},
			wantField: "workload", wantErr: "no Service to send the traffic through: add one whose selector matches the pods of Deployment web (app: web)"},
		{name: "path", paths: []string{deploy}, traffic: Traffic{Path: "work"},
			wantField: "traffic.path", wantErr: `want a path that starts with /, such as "/work"`},
		{name: "pool limit without a pool", paths: []string{deploy}, traffic: Traffic{Clients: []Client{{Kind: load.NewConn, MaxLifetime: time.Minute}}},
			wantField: "traffic.clients[0].maxLifetime", wantErr: "only a keep-alive client has a pool to limit"},
		{name: "negative pool limit", paths: []string{deploy}, traffic: Traffic{Clients: []Client{{Kind: load.KeepAlive, MaxIdle: -time.Second}}},
			wantField: "traffic.clients[0].maxIdle", wantErr: "-1s is negative"},
		{name: "gRPC path not a method", paths: []string{deploy}, traffic: Traffic{Protocol: ProtocolGRPC, Path: "/work"},
			wantField: "traffic.path", wantErr: `gRPC method "/work": want /SERVICE/METHOD, such as /grpc.health.v1.Health/Check: a gRPC traffic's path is the method it calls`},
		{name: "valid", paths: []string{deploy, api}, traffic: Traffic{Service: "api", Path: "/work"}},
		{name: "valid gRPC method", paths: []string{deploy}, traffic: Traffic{Service: "web", Protocol: ProtocolGRPC, Path: "/grpc.health.v1.Health/Check"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := FromManifests("rollout", tt.paths, tt.traffic, Action{Kind: ActionRolloutRestart}, 1)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("FromManifests() = %v, want no error", err)
				}
				if svc, err := s.Service(); err != nil || svc.Name != tt.traffic.Service {
					t.Errorf("Service() = %v, %v; want %s", svc, err, tt.traffic.Service)
				}
				return
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("FromManifests() = %v, want an *Error", err)
			}
			if e.Field != tt.wantField || e.Err.Error() != tt.wantErr || e.File != strings.Join(tt.paths, ",") {
				t.Errorf("error in %s, field %q: %q; want in %s, field %q: %q", e.File, e.Field, e.Err, strings.Join(tt.paths, ","), tt.wantField, tt.wantErr)
			}
		})
	}
}
