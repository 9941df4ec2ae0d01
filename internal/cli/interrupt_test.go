package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLabInterrupt runs `closingtime lab` as a process, interrupts it once
// traffic flows, and checks that it exits with status 130 and leaves no pod
// behind: with one interrupt, after stopping its clusters; with a second
// one during that clean-up, which may or may not have ended already, at
// once. It is not parallel: while it runs, every process of this test
// binary other than the test itself is one of the lab's pods.
func TestLabInterrupt(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scenario on the embedded cluster")
	}
	for _, tt := range []struct {
		name    string
		signals int
		bound   time.Duration // from the first signal to the exit
	}{
		{name: "once", signals: 1, bound: 30 * time.Second},
		{name: "twice", signals: 2, bound: 5 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "lab", "--quick", "1-plain", "--results", "", "--report", "")
			cmd.Dir = t.TempDir()
			cmd.Env = append(os.Environ(), runAsCommand+"=1")
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cmd.Process.Kill() })
			var log bytes.Buffer // written by the reader until read is closed
			warm, stopping, read := make(chan struct{}), make(chan struct{}), make(chan struct{})
			go func() {
				defer close(read)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					log.WriteString(sc.Text() + "\n")
					for _, l := range []struct {
						text string
						ch   chan struct{}
					}{{"warm-up", warm}, {"stopping every pod", stopping}} {
						if strings.Contains(sc.Text(), l.text) {
							select {
							case <-l.ch:
							default:
								close(l.ch)
							}
						}
					}
				}
			}()
			select {
			case <-warm:
			case <-time.After(90 * time.Second):
				t.Fatalf("no warm-up after 90 s")
			}
			if pods := podsOf(t, os.Args[0]); len(pods) == 0 {
				t.Fatal("no pod process found while the scenario runs")
			}
			interrupted := time.Now()
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			if tt.signals == 2 {
				// Two signals sent at once would merge into one pending
				// signal: send the second once the first was seen.
				select {
				case <-stopping:
				case <-time.After(tt.bound):
					t.Fatal("the first interrupt was not reported")
				}
				cmd.Process.Signal(syscall.SIGINT) // it may have exited already
			}
			exited := make(chan error, 1)
			go func() { <-read; exited <- cmd.Wait() }()
			var exitErr *exec.ExitError
			select {
			case err := <-exited:
				if !errors.As(err, &exitErr) || exitErr.ExitCode() != ExitInterrupted {
					t.Errorf("exit: %v; want status %d\n%s", err, ExitInterrupted, log.String())
				}
			case <-time.After(tt.bound):
				t.Fatalf("still running %s after the interrupt\n%s", tt.bound, log.String())
			}
			t.Logf("exited %s after the interrupt", time.Since(interrupted).Round(time.Millisecond))
			if !strings.Contains(log.String(), "lab: interrupted: stopping every pod") {
				t.Errorf("stderr does not say it was interrupted:\n%s", log.String())
			}
			if tt.signals == 1 && strings.Contains(log.String(), "interrupted again") {
				t.Errorf("one interrupt, yet stderr says there were two:\n%s", log.String())
			}
			// Pods killed by their parent's death take a moment to go.
			deadline := time.Now().Add(5 * time.Second)
			for {
				pods := podsOf(t, os.Args[0])
				if len(pods) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("pods left behind: %v", pods)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

// podsOf returns the processes other than this one that run the executable
// exe.
func podsOf(t *testing.T, exe string) []int {
	t.Helper()
	exe, err := filepath.EvalSymlinks(exe)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			pids = append(pids, pid)
		}
	}
	return pids
}
