package lint

import "testing"

func TestTerminationBudget(t *testing.T) { testRule(t, &terminationBudget) }
