package lint

import "testing"

func TestLivenessWithoutStartupProbe(t *testing.T) { testRule(t, &livenessWithoutStartupProbe) }
