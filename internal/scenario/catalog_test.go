package scenario

import "testing"

// TestCatalog checks that every built-in scenario parses, has a
// description, and names its workload's Service and Deployment.
func TestCatalog(t *testing.T) {
	all, err := Catalog()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"1-plain", "2-readiness", "3-graceful", "A-npm-pid1", "B-no-handler",
		"C-graceful-keepalive", "D-prestop", "E-client-retry", "F-closingtime-graceful"}
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
