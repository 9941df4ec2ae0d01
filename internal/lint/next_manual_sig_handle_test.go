package lint

import "testing"

func TestNextManualSigHandle(t *testing.T) { testRule(t, &nextManualSigHandle) }
