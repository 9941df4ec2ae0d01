package lint

import "testing"

func TestPdbBlocksDrain(t *testing.T) { testRule(t, &pdbBlocksDrain) }
