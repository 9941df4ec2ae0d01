package lint

import "testing"

func TestGRPCHeadlessMaxAge(t *testing.T) { testRule(t, &grpcHeadlessMaxAge) }
