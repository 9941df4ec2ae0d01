package target_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/target"
	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// runInProcess runs cfg in this process on a free loopback port and returns
// its address and log. The test's end cancels Run, which must then return
// the context's error.
func runInProcess(t *testing.T, cfg target.Config) (string, *testbinary.Events) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	log := testbinary.ReadEvents(t, pr)
	cfg.Listen, cfg.Log = "127.0.0.1:0", pw
	ran := make(chan error, 1)
	go func() {
		_, err := target.Run(ctx, cfg)
		pw.Close()
		ran <- err
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-ran; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v after its context was cancelled, want %v", err, context.Canceled)
		}
	})
	addr, _ := log.Wait(t, "listening")["address"].(string)
	return addr, log
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	t.Cleanup(healthy.Close)
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	t.Cleanup(failing.Close)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(testbinary.WaitLimit):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()

	tests := []struct {
		name       string
		mode       target.Mode
		dependency string
		path       string
		wantStatus int
		wantBody   string
	}{
		{"work", target.ModeExit, "", "/work", 200, "worked 20ms"},
		{"work, graceful", target.ModeGraceful, "", "/work", 200, "worked 20ms"},
		{"ready", target.ModeExit, "", "/ready", 200, "ok"},
		{"ready, graceful", target.ModeGraceful, "", "/ready", 200, "ok"},
		{"ready, hostage", target.ModeHostage, "", "/ready", 200, "ok"},
		{"live", target.ModeIgnore, "", "/live", 200, "ok"},
		{"configuration", target.ModeHostage, "", "/", 200, `"shutdown": "hostage"`},
		{"unknown path", target.ModeExit, "", "/nothing", 404, ""},
		{"deep health without a dependency", target.ModeExit, "", "/health-deep", 200, "no dependency"},
		{"deep health, dependency answers 200", target.ModeExit, healthy.URL, "/health-deep", 200, "200 OK"},
		{"deep health, dependency answers 500", target.ModeExit, failing.URL, "/health-deep", 503, "500"},
		{"deep health, dependency too slow", target.ModeExit, slow.URL, "/health-deep", 503, "deadline exceeded"},
		{"deep health, dependency refuses", target.ModeExit, gone.URL, "/health-deep", 503, "refused"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			addr, log := runInProcess(t, target.Config{
				Shutdown:          tt.mode,
				Work:              target.Work{{Min: 20 * time.Millisecond}},
				Dependency:        tt.dependency,
				DependencyTimeout: 300 * time.Millisecond,
				PodName:           "pod-e",
				AccessLog:         true,
			})
			r := testbinary.Dial(t, addr).Get(t, tt.path, "id-7")
			if r.Status != tt.wantStatus || !strings.Contains(r.Body, tt.wantBody) {
				t.Errorf("GET %s: %d %q, want %d with %q", tt.path, r.Status, r.Body, tt.wantStatus, tt.wantBody)
			}
			if r.Header.Get("X-Pod-Name") != "pod-e" || r.Header.Get("X-Request-Id") != "id-7" {
				t.Errorf("GET %s: headers %v, want X-Pod-Name pod-e and X-Request-Id id-7", tt.path, r.Header)
			}
			e := log.Wait(t, "request")
			if e["id"] != "id-7" || e["path"] != tt.path || e["status"] != float64(tt.wantStatus) || e["pod"] != "pod-e" {
				t.Errorf("request event = %v, want id id-7, path %s, status %d, pod pod-e", e, tt.path, tt.wantStatus)
			}
		})
	}
}

func TestTextLog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var log testbinary.SyncBuffer
	ran := make(chan error, 1)
	go func() {
		_, err := target.Run(ctx, target.Config{Listen: "127.0.0.1:0", LogFormat: target.LogText, PodName: "pod-t", Log: &log})
		ran <- err
	}()
	if !eventually(func() bool { return strings.Contains(log.String(), "event=listening") }) {
		cancel()
		t.Fatalf("no listening event (Run: %v) in %q", <-ran, log.String())
	}
	cancel()
	<-ran
	for _, want := range []string{"event=started", "pod=pod-t", "config.shutdown=exit", "address=127.0.0.1:"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("text log lacks %q:\n%s", want, log.String())
		}
	}
}

func TestRunInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     target.Config
		wantErr string
	}{
		{"unknown mode", target.Config{Shutdown: "linger"}, `unknown shutdown mode "linger"`},
		{"unknown wrapper", target.Config{Wrapper: "bash"}, `unknown wrapper "bash"`},
		{"unknown log format", target.Config{LogFormat: "xml"}, `unknown log format "xml"`},
		{"wrapper without command", target.Config{Wrapper: target.WrapperNPM}, "without a command"},
		{"work range backwards", target.Config{Work: target.Work{{Min: time.Second, Max: time.Millisecond}}}, "ends before it starts"},
		{"work shares over 100%", target.Config{Work: target.Work{{Min: time.Second, Percent: 60}, {Min: time.Second, Percent: 50}}}, "shares sum to 110%, over 100%"},
		{"work shares short of 100%", target.Config{Work: target.Work{{Min: time.Second, Percent: 60}, {Min: time.Second, Percent: 30}}}, "not 100%"},
		{"work shares leave nothing", target.Config{Work: target.Work{{Min: time.Second, Percent: 100}, {Min: time.Second}}}, "leave nothing"},
		{"negative delay", target.Config{StartupDelay: -time.Second}, "negative startup delay"},
		{"crash code too large", target.Config{CrashCode: 256}, "crash code 256"},
		{"dependency not http", target.Config{Dependency: "ftp://db"}, "not an http or https URL"},
		{"dependency of a gRPC server", target.Config{GRPC: true, Dependency: "http://db/"}, "the gRPC server has none"},
		{"port in use", target.Config{Listen: "127.0.0.1:-1"}, "listen tcp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := target.Run(context.Background(), tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Run: error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestReadyFile: the ready file exists, with the pod's name, once the port
// is open, and is gone once the server has exited.
func TestReadyFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "start_success")
	ctx, cancel := context.WithCancel(context.Background())
	var log testbinary.SyncBuffer
	ran := make(chan error, 1)
	go func() {
		_, err := target.Run(ctx, target.Config{Listen: "127.0.0.1:0", PodName: "pod-r", ReadyFile: path, StartupDelay: time.Second, Log: &log})
		ran <- err
	}()
	if _, err := os.Stat(path); err == nil {
		t.Error("ready file written before the start-up delay ended")
	}
	if !eventually(func() bool { return strings.Contains(log.String(), `"listening"`) }) {
		cancel()
		t.Fatalf("no listening event (Run: %v) in %q", <-ran, log.String())
	}
	b, err := os.ReadFile(path)
	if err != nil || string(b) != "pod-r\n" {
		t.Errorf("ready file after listening: %q, %v; want the pod's name", b, err)
	}
	cancel()
	<-ran
	if _, err := os.Stat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ready file after the exit: %v, want it gone", err)
	}
}
