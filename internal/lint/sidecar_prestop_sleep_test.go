package lint

import "testing"

func TestSidecarPreStopSleep(t *testing.T) { testRule(t, &sidecarPreStopSleep) }
