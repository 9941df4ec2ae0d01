package lint

import "testing"

func TestShellPID1(t *testing.T) { testRule(t, &shellPID1) }
