package lint

import "testing"

func TestSupervisordOverGrace(t *testing.T) { testRule(t, &supervisordOverGrace) }
