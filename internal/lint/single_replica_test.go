package lint

import "testing"

func TestSingleReplica(t *testing.T) { testRule(t, &singleReplica) }
