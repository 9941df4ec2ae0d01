package lint

import "testing"

func TestProxyNotSidecar(t *testing.T) { testRule(t, &proxyNotSidecar) }
