package lint

import "testing"

func TestHpaPDBBlocksDrain(t *testing.T) { testRule(t, &hpaPDBBlocksDrain) }
