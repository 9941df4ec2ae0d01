package lint

import "testing"

func TestTerminationGraceZero(t *testing.T) { testRule(t, &terminationGraceZero) }
