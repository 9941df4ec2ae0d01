package lint

import "testing"

func TestPreStopDelayMissing(t *testing.T) { testRule(t, &preStopDelayMissing) }
