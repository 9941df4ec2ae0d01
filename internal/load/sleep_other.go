//go:build !linux

package load

import "time"

// sleepPrecise sleeps for d as precisely as the Go runtime allows here.
func sleepPrecise(d time.Duration) {
	time.Sleep(d)
}
