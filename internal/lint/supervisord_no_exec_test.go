package lint

import "testing"

func TestSupervisordNoExec(t *testing.T) { testRule(t, &supervisordNoExec) }
