package lint

import "testing"

func TestPdbMissing(t *testing.T) { testRule(t, &pdbMissing) }
