package target

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// runWrapper runs Config.WrapperCommand as a child and behaves as
// Config.Wrapper says until it would exit.
func runWrapper(ctx context.Context, cfg Config, log *slog.Logger) (int, error) {
	log = log.With("wrapper", string(cfg.Wrapper))
	// npm handles SIGTERM and SIGINT without forwarding them; sh leaves
	// SIGTERM to the kernel, which, as PID 1 of a namespace, ignores it.
	var signals chan os.Signal
	if cfg.Wrapper == WrapperNPM {
		signals = make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
		defer signal.Stop(signals)
	} else if err := defaultSIGTERM(); err != nil {
		return 0, fmt.Errorf("wrapper %s: %w", cfg.Wrapper, err)
	}

	attr, err := childAttr()
	if err != nil {
		return 0, fmt.Errorf("wrapper %s: %w", cfg.Wrapper, err)
	}
	cmd := exec.CommandContext(ctx, cfg.WrapperCommand[0], cfg.WrapperCommand[1:]...)
	cmd.Stdout, cmd.Stderr, cmd.SysProcAttr = cfg.Log, cfg.Stderr, attr
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("wrapper %s: start child: %w", cfg.Wrapper, err)
	}
	command := strings.Join(cfg.WrapperCommand, " ")
	log.Info("wrapper_started", "child_pid", cmd.Process.Pid, "command", command)
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		close(exited)
	}()

	select {
	case <-exited:
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		code := childExitCode(cmd.ProcessState)
		if cfg.Wrapper == WrapperNPM && code != 0 {
			fmt.Fprintf(cfg.Stderr, "npm error code %d\nnpm error command failed\nnpm error command sh -c %s\n", code, command)
		}
		log.Info("wrapper_exiting", "code", code)
		return code, nil
	case sig := <-signals:
		// What npm 11 as PID 1 did in seed 000: it reports the signal as
		// the script's failure and exits 1 about 0.7 s later, while the
		// server, its grandchild, never hears of it.
		name := "SIGTERM"
		if sig == syscall.SIGINT {
			name = "SIGINT"
		}
		fmt.Fprintf(cfg.Stderr, "npm error command failed\nnpm error signal %s\nnpm error command sh -c %s\n", name, command)
		log.Info("wrapper_signal", "signal", name, "forwarded", false)
		select {
		case <-time.After(cfg.WrapperDelay):
		case <-ctx.Done():
			<-exited
			return 0, ctx.Err()
		}
		log.Info("wrapper_exiting", "code", 1)
		return 1, nil
	}
}
