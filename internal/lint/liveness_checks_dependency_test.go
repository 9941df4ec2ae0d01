package lint

import "testing"

func TestLivenessChecksDependency(t *testing.T) { testRule(t, &livenessChecksDependency) }
