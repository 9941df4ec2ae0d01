//go:build !unix

package controlplane

import "fmt"

// lock refuses: the control plane's processes are stopped with signals,
// which only Unix systems have.
func lock(path string) (unlock func(), err error) {
	return nil, fmt.Errorf("%w: it runs on Unix systems only", ErrUnavailable)
}
