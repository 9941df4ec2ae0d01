package lint

import "testing"

func TestPreStopExecSleep(t *testing.T) { testRule(t, &preStopExecSleep) }
