package lint

import "testing"

func TestPdbSelectsNothing(t *testing.T) { testRule(t, &pdbSelectsNothing) }
