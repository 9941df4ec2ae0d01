package load

import (
	"syscall"
	"time"
)

// sleepPrecise sleeps for d with the kernel's high-resolution timer, which
// wakes within about 100 µs. The Go runtime's timers wake up to a
// millisecond late when the process is idle (the netpoller waits in whole
// milliseconds), which alone would break a sub-millisecond schedule.
func sleepPrecise(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := syscall.NsecToTimespec(int64(d))
	for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
	}
}
