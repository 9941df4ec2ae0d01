package cluster

import "testing"

func TestScheduleNode(t *testing.T) {
	tests := []struct {
		name  string
		nodes []NodeLoad
		want  int
	}{
		{"fewest pods", []NodeLoad{{"a", true, 3}, {"b", true, 1}, {"c", true, 2}}, 1},
		{"first on a tie", []NodeLoad{{"a", true, 2}, {"b", true, 1}, {"c", true, 1}}, 1},
		{"unschedulable skipped", []NodeLoad{{"a", false, 0}, {"b", true, 5}}, 1},
		{"none schedulable", []NodeLoad{{"a", false, 0}, {"b", false, 0}}, -1},
		{"no nodes", nil, -1},
	}
	for _, tt := range tests {
		if got := ScheduleNode(tt.nodes); got != tt.want {
			t.Errorf("%s: ScheduleNode(%v) = %d, want %d", tt.name, tt.nodes, got, tt.want)
		}
	}
}
