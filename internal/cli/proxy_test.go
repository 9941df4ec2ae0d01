package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

func TestProxyUsageErrors(t *testing.T) {
	t.Parallel()
	testUsage(t, []usageCase{
		{name: "SIGTERM mode", args: []string{"proxy", "--on-sigterm", "linger"}, wantErr: "accepted values are exit, drain"},
		{name: "upstream", args: []string{"proxy", "--upstream", "app"}, wantErr: "--upstream"},
		{name: "admin", args: []string{"proxy", "--admin", "9901"}, wantErr: "or none"},
		{name: "negative drain", args: []string{"proxy", "--drain-time=-1s"}, wantErr: "--drain-time"},
		{name: "an argument", args: []string{"proxy", "127.0.0.1:8080"}, wantErr: "unknown command"},
		{name: "admin without a path", args: []string{"proxy", "admin"}, wantErr: "accepts 1 arg"},
		{name: "admin timeout zero", args: []string{"proxy", "admin", "--timeout", "0", "/quitquitquit"}, wantErr: "invalid --timeout 0"},
		{name: "role", args: []string{"proxy", "--role", "gateway"}, wantErr: "accepted values are sidecar, edge"},
		{name: "an edge flag for the sidecar", args: []string{"proxy", "--service", "default/app"}, wantErr: "--service is for --role edge, not sidecar"},
		{name: "a sidecar flag for the edge", args: []string{"proxy", "--role", "edge", "--service", "default/app", "--upstream", "127.0.0.1:1"}, wantErr: "--upstream is for --role sidecar, not edge"},
		{name: "service without namespace", args: []string{"proxy", "--role", "edge", "--service", "app"}, wantErr: "want namespace/name"},
		{name: "an edge without endpoints", args: []string{"proxy", "--role", "edge"}, wantErr: "give one of them"},
		{name: "an edge with both", args: []string{"proxy", "--role", "edge", "--service", "default/app", "--upstreams", "127.0.0.1:1"}, wantErr: "give one of them"},
		{name: "next upstream", args: []string{"proxy", "--role", "edge", "--upstreams", "127.0.0.1:1", "--next-upstream", "error,off"}, wantErr: "or off"},
		{name: "update delay", args: []string{"proxy", "--role", "edge", "--upstreams", "127.0.0.1:1", "--update-delay", "4s-1s"}, wantErr: "such as 500ms-4s"},
		{name: "read timeout zero", args: []string{"proxy", "--role", "edge", "--upstreams", "127.0.0.1:1", "--read-timeout", "0"}, wantErr: "more than 0"},
		{name: "termination drain zero", args: []string{"proxy", "--on-sigterm", "drain", "--termination-drain", "0"}, wantErr: "--on-sigterm exit exits at once"},
		{name: "connect timeout zero", args: []string{"proxy", "--connect-timeout", "0"}, wantErr: "must be more than 0"},
		{name: "keepalive", args: []string{"proxy", "--role", "edge", "--upstreams", "127.0.0.1:1", "--keepalive", "-1"}, wantErr: "--keepalive -1: want 0"},
		{name: "tries", args: []string{"proxy", "--role", "edge", "--upstreams", "127.0.0.1:1", "--next-upstream-tries", "0"}, wantErr: "--next-upstream-tries 0"},
		{name: "an upstream without a port", args: []string{"proxy", "--role", "edge", "--upstreams", "nohostport"}, wantErr: `--upstreams "nohostport"`},
		{name: "port without service", args: []string{"proxy", "--role", "edge", "--upstreams", "127.0.0.1:1", "--port", "http"}, wantErr: "--port is the --service's port"},
		{name: "missing kubeconfig", args: []string{"proxy", "--role", "edge", "--service", "default/app", "--kubeconfig", "/nonexistent/kubeconfig"}, wantErr: "--kubeconfig"},
	})
}

// TestProxyAdminFails: an admin call that nothing answers exits 4 and
// names the address; one that the endpoint refuses exits 1 and says its
// answer.
func TestProxyAdminFails(t *testing.T) {
	t.Parallel()
	addr := testbinary.ClosedAddr(t)
	status, stdout, stderr := runCLI(context.Background(), "proxy", "admin", "--admin", addr, "/drain_listeners?graceful")
	if status != ExitError || !strings.Contains(stderr, addr) || stdout != "" {
		t.Errorf("nothing there: exit %d, stderr %q, stdout %q; want %d and an error naming %s", status, stderr, stdout, ExitError, addr)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "This endpoint requires POST.", http.StatusMethodNotAllowed)
	}))
	t.Cleanup(srv.Close)
	status, _, stderr = runCLI(context.Background(), "proxy", "admin", "--admin", srv.Listener.Addr().String(), "/quitquitquit")
	if status != ExitFailed || !strings.Contains(stderr, "admin /quitquitquit: 405 Method Not Allowed") {
		t.Errorf("refused: exit %d, stderr %q; want %d and the answer", status, stderr, ExitFailed)
	}
}
