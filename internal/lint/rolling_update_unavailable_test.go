package lint

import "testing"

func TestRollingUpdateUnavailable(t *testing.T) { testRule(t, &rollingUpdateUnavailable) }
