package target_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/closingtime-dev/closingtime/internal/testbinary"
)

// pidNamespace returns the attributes that start a process as PID 1 of a
// new PID namespace: CLONE_NEWPID as root, with a new user namespace that
// maps the caller to root otherwise. It skips the test, saying why, where
// neither can be made.
func pidNamespace(t *testing.T) *syscall.SysProcAttr {
	t.Helper()
	candidates := []*syscall.SysProcAttr{{Cloneflags: syscall.CLONE_NEWPID}}
	if os.Getuid() != 0 {
		candidates = []*syscall.SysProcAttr{{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		}}
	}
	var errs []error
	for _, attr := range candidates {
		probe := exec.Command(binary, "version")
		probe.SysProcAttr = attr
		if err := probe.Run(); err != nil {
			errs = append(errs, err)
			continue
		}
		return attr
	}
	t.Skipf("cannot create a PID namespace here (%v); run as root or allow unprivileged user namespaces", errors.Join(errs...))
	return nil
}

// where is where a process test runs the server: as an ordinary process, or
// as PID 1 of a new PID namespace, as in a container.
type where struct {
	name string
	attr func(*testing.T) *syscall.SysProcAttr
}

var (
	ordinary  = where{"ordinary process", func(*testing.T) *syscall.SysProcAttr { return nil }}
	namespace = where{"PID 1 of a namespace", pidNamespace}
)

// checkSignaled checks that the process was killed by sig.
func checkSignaled(t *testing.T, p *testbinary.Proc, sig syscall.Signal) {
	t.Helper()
	if ws := p.Wait(t); !ws.Signaled() || ws.Signal() != sig {
		t.Errorf("process ended with %v, want killed by %v (status %d)", p.Cmd.ProcessState, sig, 128+int(sig))
	}
}

func TestIgnore(t *testing.T) {
	t.Parallel()
	t.Run("ordinary process dies to SIGTERM", func(t *testing.T) {
		t.Parallel()
		p := serve(t, ordinary.attr(t), nil, "--listen", "127.0.0.1:0", "--shutdown", "ignore")
		p.Addr(t)
		p.Signal(t, syscall.SIGTERM)
		checkSignaled(t, p, syscall.SIGTERM)
		checkNames(t, p, "started", "listening")
	})
	t.Run("PID 1 survives SIGTERM, dies to SIGKILL", func(t *testing.T) {
		t.Parallel()
		p := serve(t, namespace.attr(t), nil, "--listen", "127.0.0.1:0", "--shutdown", "ignore")
		addr := p.Addr(t)
		p.Signal(t, syscall.SIGTERM)
		time.Sleep(time.Second)
		if r := testbinary.Dial(t, addr).Get(t, "/ready", "after-sigterm"); r.Status != 200 {
			t.Errorf("/ready a second after SIGTERM: %d, want 200", r.Status)
		}
		p.Signal(t, syscall.SIGKILL)
		checkSignaled(t, p, syscall.SIGKILL)
		checkNames(t, p, "started", "listening")
	})
}

// TestWrappers sends SIGTERM to a wrapper with a request in flight on its
// grandchild, the server, which never receives the signal.
func TestWrappers(t *testing.T) {
	t.Parallel()
	// work is far longer than the test takes to cut the request (a settle
	// and, in the namespace, a second of survival and a SIGKILL), so that
	// only a request that was not cut at the signal reaches it.
	const work = 10 * time.Second
	tests := []struct {
		wrapper string
		where   where
		// survives is how long the server goes on serving after SIGTERM,
		// zero if it dies with the wrapper; the test then sends SIGKILL.
		survives time.Duration
		check    func(*testing.T, *testbinary.Proc)
	}{
		{"npm", namespace, 0, checkNPM},
		{"npm", ordinary, 0, checkNPM},
		{"sh", namespace, time.Second, func(t *testing.T, p *testbinary.Proc) { checkSignaled(t, p, syscall.SIGKILL) }},
		{"sh", ordinary, 0, func(t *testing.T, p *testbinary.Proc) { checkSignaled(t, p, syscall.SIGTERM) }},
	}
	for _, tt := range tests {
		t.Run(tt.wrapper+" as "+tt.where.name, func(t *testing.T) {
			t.Parallel()
			p := serve(t, tt.where.attr(t), nil, "--listen", "127.0.0.1:0", "--wrapper", tt.wrapper, "--work", work.String())
			addr := p.Addr(t)
			c := testbinary.Dial(t, addr)
			sent := time.Now()
			c.Send(t, "/work", "in-flight")
			time.Sleep(settle)
			p.Signal(t, syscall.SIGTERM)
			if tt.survives > 0 {
				time.Sleep(tt.survives)
				if r := testbinary.Dial(t, addr).Get(t, "/live", "survivor"); r.Status != 200 {
					t.Errorf("/live %v after SIGTERM: %d, want 200", tt.survives, r.Status)
				}
				p.Signal(t, syscall.SIGKILL)
			}
			r, err := c.Read()
			if err == nil {
				t.Errorf("request in flight completed with %d, want it cut", r.Status)
			} else if took := time.Since(sent); took > work-time.Second {
				t.Errorf("request in flight cut after %v, want well before its %v", took, work)
			}
			tt.check(t, p)
			for _, name := range p.Log.Names() {
				if name == "sigterm" {
					t.Error("the server logged SIGTERM, which its wrapper should not have forwarded")
				}
			}
		})
	}
}

// checkNPM checks the npm-like wrapper's exit and messages.
func checkNPM(t *testing.T, p *testbinary.Proc) {
	t.Helper()
	checkExit(t, p, "wrapper_exiting", 1)
	if !strings.Contains(p.Stderr(), "npm error signal SIGTERM") {
		t.Errorf("standard error %q lacks npm's signal error", p.Stderr())
	}
	if e := p.Log.Wait(t, "wrapper_signal"); e["signal"] != "SIGTERM" || e["forwarded"] != false || e["wrapper"] != "npm" {
		t.Errorf("wrapper_signal = %v, want SIGTERM not forwarded by npm", e)
	}
}
