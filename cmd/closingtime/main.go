// Command closingtime measures, reproduces and prevents the requests that
// Kubernetes rollouts, scale-ins and node drains drop.
package main

import (
	"context"
	"os"

	"github.com/closingtime-dev/closingtime/internal/cli"
)

func main() {
	// No signal context here: each command installs the signal handlers it
	// needs. `closingtime serve --shutdown ignore` must run with no SIGTERM
	// handler at all, so that as PID 1 the kernel ignores the signal.
	os.Exit(cli.Main(context.Background(), os.Args, cli.StdStreams()))
}
