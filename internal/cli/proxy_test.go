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
