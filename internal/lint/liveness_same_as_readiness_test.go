package lint

import "testing"

func TestLivenessSameAsReadiness(t *testing.T) { testRule(t, &livenessSameAsReadiness) }
