package lint

import "testing"

func TestReadinessProbeMissing(t *testing.T) { testRule(t, &readinessProbeMissing) }
