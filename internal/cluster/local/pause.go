package local

import (
	"os"
	"os/signal"
	"syscall"
)

// Pause is the pause process of a pod whose containers share a PID
// namespace: its PID 1, as Kubernetes' pause container is. It reaps the
// processes that the containers' processes leave behind, which the kernel
// gives to it, and returns on SIGTERM or SIGINT; the kubelet ends it with
// SIGKILL once the pod's containers have stopped. `closingtime pause` runs
// it.
func Pause() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if err == syscall.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
