package scenario

import (
	"slices"
	"strings"
	"testing"
)

// TestCatalog checks that every built-in scenario parses, has a
// description, and names its workload's Service and Deployment.
func TestCatalog(t *testing.T) {
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1-plain", "2-readiness", "3-graceful", "A-npm-pid1", "B-no-handler",
		"C-graceful-keepalive", "D-prestop", "E-client-retry", "F-closingtime-graceful",
		"crashloop", "edge-retry-off", "edge-retry-on", "grpc-drain-short", "grpc-graceful", "grpc-headless-watch", "grpc-headless", "grpc-max-age", "grpc-pinned", "grpc-stop",
		"http2-graceful", "http2-max-lifetime", "http2-pinned", "pdb-1-evict", "pdb-2-delete", "pdb-3-rollout", "pdb-4-drain-min-available",
		"pdb-5-drain-max-unavailable", "probe-liveness-deep", "probe-readiness-deep",
		"seed002-drain", "seed002-no-fix", "seed002-prestop-drain",
		"seed003-drain-12s", "seed003-drain-24s", "seed003-pool-idle", "seed003-pool-lifetime",
		"seed003-proxy-last", "seed003-proxy-outlives",
		"seed003-scale-in-drain", "seed003-scale-in-exit", "seed003-scale-out-early", "seed003-scale-out-held",
		"seed003-supervisord-exec", "seed003-supervisord-sh",
		"surge-0-unavailable-1", "surge-1-unavailable-0"}
	if len(all) != len(want) {
		t.Fatalf("catalog has %d scenarios, want %d", len(all), len(want))
	}
	for i, s := range all {
		if s.Name != want[i] {
			t.Errorf("catalog[%d] = %s, want %s", i, s.Name, want[i])
		}
		if s.Description == "" {
			t.Errorf("%s has no description", s.Name)
		}
	}
	if _, err := Select(all, []string{"nope"}); err == nil {
		t.Error("Select(nope) succeeded")
	}
}

// TestSelectGroup checks that a group's name selects its scenarios, in
// the catalog's order, next to scenarios named one by one.
func TestSelectGroup(t *testing.T) {
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	picked, err := Select(all, []string{"surge-vs-unavailable", "crashloop"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range picked {
		got = append(got, s.Name)
	}
	want := []string{"surge-0-unavailable-1", "surge-1-unavailable-0", "crashloop"}
	if !slices.Equal(got, want) {
		t.Errorf("Select(surge-vs-unavailable, crashloop) = %v, want %v", got, want)
	}
	_, err = Select(all, []string{"nope"})
	if err == nil || !strings.Contains(err.Error(), "pdb, pdb-1-evict") {
		t.Errorf("Select(nope) = %v, want an error listing groups and names", err)
	}
}
