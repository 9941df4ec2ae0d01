package lint

import "testing"

func TestSupervisordStopWaitSecs(t *testing.T) { testRule(t, &supervisordStopWaitSecs) }
