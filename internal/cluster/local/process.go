package local

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/clock"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// isolation is how a container's processes are set apart from the kubelet's.
type isolation int

const (
	// isolatePID gives the container a PID namespace of its own (root).
	isolatePID isolation = iota
	// isolateUserPID gives it a user namespace, mapping the kubelet's user
	// to itself, and a PID namespace in it (an unprivileged user, where the
	// kernel allows user namespaces).
	isolateUserPID
	// isolateNone runs it as a process group of the kubelet's namespace:
	// its first process is not PID 1 and PID 1's signal rules do not apply.
	isolateNone
	// isolatePod runs it in its pod's PID namespace, whose PID 1 is the
	// pod's pause process (shareProcessNamespace): its first process is
	// not PID 1 either (I6).
	isolatePod
)

func (i isolation) String() string {
	switch i {
	case isolatePID:
		return "pid"
	case isolateUserPID:
		return "user+pid"
	case isolatePod:
		return "pod"
	}
	return "none"
}

// sysProcAttr returns the attributes that start a process isolated by i.
// Every process is a process group leader, so that the kubelet can kill
// what the container started, and dies with the kubelet (Pdeathsig).
func (i isolation) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	switch i {
	case isolatePID:
		attr.Cloneflags = syscall.CLONE_NEWPID
	case isolateUserPID:
		attr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
		attr.UidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getuid(), HostID: os.Getuid(), Size: 1}}
		attr.GidMappings = []syscall.SysProcIDMap{{ContainerID: os.Getgid(), HostID: os.Getgid(), Size: 1}}
		attr.GidMappingsEnableSetgroups = false
	}
	return attr
}

// isolator chooses, once for a kubelet, the strongest isolation the system
// allows, and remembers why a stronger one was refused.
type isolator struct {
	mu     sync.Mutex
	chosen bool
	level  isolation
	reason string // why level is weaker than isolatePID; empty if it is not
}

// start starts a command that newCmd builds, with the chosen isolation, in
// sandbox's network.
// Until one level has worked, it tries each from the strongest, and falls
// back when the kernel refuses the namespaces (EPERM, EINVAL, ENOSPC,
// EUSERS). It returns the started command, the level and, for a level below
// isolatePID, why the stronger ones were refused.
func (s *isolator) start(sandbox podnet.Sandbox, newCmd func() *exec.Cmd) (*exec.Cmd, isolation, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	level := s.level
	var refused []string
	// At most one try per level: the loop advances level or returns.
	for {
		cmd := newCmd()
		cmd.SysProcAttr = level.sysProcAttr()
		err := sandbox.Start(cmd)
		if err != nil && !s.chosen && level < isolateNone && isNamespaceRefusal(err) {
			refused = append(refused, fmt.Sprintf("%s namespace: %v", level, err))
			level++
			continue
		}
		if err == nil && !s.chosen {
			s.chosen, s.level, s.reason = true, level, strings.Join(refused, "; ")
		}
		return cmd, level, s.reason, err
	}
}

// startIsolated starts a command that newCmd builds in sandbox's network:
// in shared, the pod's PID namespace, if not nil, else isolated as iso
// allows. It returns what [isolator.start] does.
func startIsolated(iso *isolator, shared *sharedPID, sandbox podnet.Sandbox, newCmd func() *exec.Cmd) (*exec.Cmd, isolation, string, error) {
	if shared == nil {
		return iso.start(sandbox, newCmd)
	}
	cmd := newCmd()
	level, reason, err := shared.start(sandbox, cmd)
	return cmd, level, reason, err
}

func isNamespaceRefusal(err error) bool {
	return errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS)
}

// Executable returns the absolute path of the file a container's command
// name runs when the kubelet starts it in dir (the container's
// workingDir; "" for the kubelet's own), or an error that says what was
// looked up where. A name without a slash is looked up in the kubelet's
// $PATH, as exec.LookPath does; any other is a path, relative to dir if it
// is relative. The file must be a regular file with an execute bit.
func Executable(name, dir string) (string, error) {
	if !strings.Contains(name, "/") {
		path, err := exec.LookPath(name)
		if err != nil {
			return "", fmt.Errorf("command %q: no executable file of that name in $PATH (%s)", name, os.Getenv("PATH"))
		}
		return filepath.Abs(path)
	}
	path, err := filepath.Abs(filepath.Join(dir, name))
	if filepath.IsAbs(name) {
		path, err = name, nil
	}
	if err != nil {
		return "", fmt.Errorf("command %q: %w", name, err)
	}
	where := path
	if path != name {
		where = fmt.Sprintf("%s (in working directory %q)", path, cmp.Or(dir, "."))
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("command %q: no file %s", name, where)
	case err != nil:
		return "", fmt.Errorf("command %q: %w", name, err)
	case fi.IsDir():
		return "", fmt.Errorf("command %q: %s is a directory, not an executable file", name, where)
	case !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("command %q: %s is not an executable file (mode %s)", name, where, fi.Mode())
	}
	return path, nil
}

// process is the main process of one container instance.
type process struct {
	cmd       *exec.Cmd
	isolation isolation
	// done is closed once the process has exited and been reaped; exitCode
	// and finishedAt are set then.
	done       chan struct{}
	exitCode   int32
	finishedAt time.Time
}

// startProcess starts argv in dir with env, in sandbox's network, isolated
// as iso allows, or in shared, the pod's PID namespace, if not nil, and
// captures its standard output and error into logs, as lines of instance
// restart. Its goroutines, which end when every process of the container
// is gone, are counted in wg.
func startProcess(wg *sync.WaitGroup, iso *isolator, sandbox podnet.Sandbox, shared *sharedPID, clk clock.PassiveClock, argv, env []string, dir string, logs *cluster.LogBuffer, restart int32) (*process, string, error) {
	var pipes [4]*os.File // stdout r, w, stderr r, w
	for i := 0; i < 4; i += 2 {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(pipes[:])
			return nil, "", fmt.Errorf("start %s: %w", argv[0], err)
		}
		pipes[i], pipes[i+1] = r, w
	}
	path, err := Executable(argv[0], dir)
	if err != nil {
		closeAll(pipes[:])
		return nil, "", err
	}
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(path, argv[1:]...)
		cmd.Args[0] = argv[0]
		cmd.Env, cmd.Dir = env, dir
		cmd.Stdout, cmd.Stderr = pipes[1], pipes[3]
		return cmd
	}
	cmd, level, reason, err := startIsolated(iso, shared, sandbox, newCmd)
	// The child has its own copies of the write ends; the kubelet keeps
	// only the read ends, so that they end when the container's processes
	// are gone.
	pipes[1].Close()
	pipes[3].Close()
	if err != nil {
		pipes[0].Close()
		pipes[2].Close()
		return nil, "", err
	}
	p := &process{cmd: cmd, isolation: level, done: make(chan struct{})}
	// The instance's output ends once it has exited and both streams have
	// ended: then every line it wrote is in logs.
	logs.Begin(restart)
	var streams sync.WaitGroup
	streams.Add(2)
	wg.Add(3)
	go captureLog(wg, &streams, clk, logs, pipes[0], "stdout", restart)
	go captureLog(wg, &streams, clk, logs, pipes[2], "stderr", restart)
	go func() {
		defer wg.Done()
		p.wait(clk)
		streams.Wait()
		logs.End(restart)
	}()
	return p, reason, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// wait reaps the process, records its exit, and kills what it left behind:
// in a PID namespace of its own the kernel has killed the rest when its
// first process exited (I3); without one, or in the pod's, the kubelet
// kills the process group, as the container's end would.
func (p *process) wait(clk clock.PassiveClock) {
	p.cmd.Wait()
	p.finishedAt = clk.Now()
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		// Runtimes report a signal death as 128+signal (T14).
		p.exitCode = 128 + int32(ws.Signal())
	default:
		p.exitCode = int32(ws.ExitStatus())
	}
	if p.isolation == isolateNone || p.isolation == isolatePod {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	close(p.done)
}

// signal sends sig to the process, unless it has exited.
func (p *process) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		p.cmd.Process.Signal(sig)
	}
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// captureLog adds the lines of r, read from stream, to logs until r ends,
// then closes r. It is counted in wg and streams.
func captureLog(wg, streams *sync.WaitGroup, clk clock.PassiveClock, logs *cluster.LogBuffer, r *os.File, stream string, restart int32) {
	defer wg.Done()
	defer streams.Done()
	defer r.Close()
	if err := logs.Capture(r, clk, stream, restart); err != nil {
		logs.Add(cluster.LogLine{Time: clk.Now(), Stream: stream, Restart: restart, Text: "closingtime: read log: " + err.Error()})
	}
}

// sharedPID is the PID namespace that the containers of a pod with
// shareProcessNamespace share, held by the pod's pause process, its PID 1,
// as Kubernetes' pause container holds it (I6).
type sharedPID struct {
	pause *exec.Cmd
	// exited is closed once the pause process has been reaped.
	exited chan struct{}
	// ns is the namespace, open for setns; -1 where the kubelet could
	// make none of its own (reason says why), and the containers run in
	// the kubelet's PID namespace, where none is PID 1 either.
	ns     int
	reason string
}

// startPause starts the pause process of a pod whose containers share a
// PID namespace: command, in sandbox's network, as the first process of a
// PID namespace where iso allows one. The goroutine that waits for it is
// counted in wg.
func startPause(wg *sync.WaitGroup, iso *isolator, sandbox podnet.Sandbox, command []string) (*sharedPID, error) {
	path, err := Executable(command[0], "")
	if err != nil {
		return nil, fmt.Errorf("pause process: %w", err)
	}
	cmd, level, reason, err := iso.start(sandbox, func() *exec.Cmd {
		cmd := exec.Command(path, command[1:]...)
		cmd.Args[0] = command[0]
		return cmd
	})
	if err != nil {
		return nil, fmt.Errorf("pause process: %w", err)
	}
	sh := &sharedPID{pause: cmd, exited: make(chan struct{}), ns: -1}
	// The goroutine that reaps the pause process once it exits.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cmd.Wait()
		close(sh.exited)
	}()
	switch {
	case level != isolatePID:
		// A process of many threads, as the kubelet is, cannot join a
		// user namespace, and so not a PID namespace in one.
		sh.reason = fmt.Sprintf("the pod's PID namespace is the kubelet's: a namespace of its own needs root (%s; %s)", level, reason)
		// It holds no namespace: it is not kept.
		cmd.Process.Kill()
	default:
		if sh.ns, err = syscall.Open(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid), syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			sh.stop()
			return nil, fmt.Errorf("pause process: open its PID namespace: %w", err)
		}
	}
	return sh, nil
}

// start starts cmd in the shared namespace, from sandbox's thread, which
// joins the namespace for its children and leaves it again (setns of
// CLONE_NEWPID changes only where the thread's children go). It returns
// the isolation cmd got and, for one weaker than isolatePod, why.
func (sh *sharedPID) start(sandbox podnet.Sandbox, cmd *exec.Cmd) (isolation, string, error) {
	cmd.SysProcAttr = isolateNone.sysProcAttr()
	if sh.ns < 0 {
		return isolateNone, sh.reason, sandbox.Start(cmd)
	}
	// No parent-death signal: a process whose parent is outside its PID
	// namespace sees none (getppid 0), and Go's fork takes that for a
	// parent already dead. The pause process has one, and the kernel
	// kills the namespace's processes with it.
	cmd.SysProcAttr.Pdeathsig = 0
	var err error
	derr := sandbox.Do(func() {
		var home int
		if home, err = syscall.Open("/proc/thread-self/ns/pid", syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err != nil {
			return
		}
		defer syscall.Close(home)
		if err = unix.Setns(sh.ns, unix.CLONE_NEWPID); err != nil {
			err = fmt.Errorf("join the pod's PID namespace: %w", err)
			return
		}
		err = cmd.Start()
		if serr := unix.Setns(home, unix.CLONE_NEWPID); serr != nil {
			// The thread's further children would land in the pod's
			// namespace: a failure of the kernel's that nothing after
			// can mend.
			panic("leave a pod's PID namespace: " + serr.Error())
		}
	})
	return isolatePod, "", cmp.Or(derr, err)
}

// stop kills the pause process, which takes with it any process left in
// the namespace, waits for it, and closes the namespace.
func (sh *sharedPID) stop() {
	sh.pause.Process.Kill()
	<-sh.exited
	if sh.ns >= 0 {
		syscall.Close(sh.ns)
	}
}
