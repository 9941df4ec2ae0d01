package lint

import "testing"

func TestDrainOverGrace(t *testing.T) { testRule(t, &drainOverGrace) }
