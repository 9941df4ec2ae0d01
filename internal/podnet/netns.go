package podnet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace that closingtime holds. One OS thread lives
// in it for as long as the Netns is open and runs what must happen inside:
// making sockets, starting processes. It is safe for concurrent use.
type Netns struct {
	fd   int
	tid  int // the thread's
	work chan func()
	done chan struct{}

	mu     sync.RWMutex // held for reading by each Do, for writing by Close
	closed bool

	sockets sync.Mutex
	spare   map[int][]int // sockets made ahead, by address family; closed by Close
}

// socketBatch is how many sockets of a family one trip to the namespace's
// thread makes. The trip, a wake-up of that thread, costs tens of
// microseconds, more than the socket itself, and on a busy machine it
// waits for the scheduler: a load generator that makes a connection per
// request would queue behind it.
const socketBatch = 32

// ErrClosed is returned by the methods of a Netns that is closed, and of
// its sandbox once closed.
var ErrClosed = errors.New("podnet: network namespace closed")

// ErrUnsupported is wrapped by the error of NewNetns where the system
// refuses network namespaces to this process (no CAP_SYS_ADMIN in its user
// namespace).
var ErrUnsupported = errors.New("podnet: network namespaces are not available")

// Check reports whether this process may make network namespaces: nil if
// it may, an error that wraps ErrUnsupported if the system refuses.
func Check() error {
	n, err := NewNetns()
	if err == nil {
		n.Close()
	}
	return err
}

// NewNetns makes a network namespace with nothing in it but a loopback
// interface, which is down. Close frees it.
func NewNetns() (*Netns, error) {
	return startNetns(func() error {
		err := unix.Unshare(unix.CLONE_NEWNET)
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSPC) {
			err = fmt.Errorf("%w: unshare(CLONE_NEWNET): %v", ErrUnsupported, err)
		}
		return err
	})
}

// JoinNetns returns a Netns of the network namespace at path, such as
// another process's node ([Netns.Path]): its thread joins the namespace,
// which the Netns keeps from being freed until Close. It needs
// CAP_SYS_ADMIN, and, where path belongs to another process, the right to
// read that process's /proc entries.
func JoinNetns(path string) (*Netns, error) {
	return startNetns(func() error {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open network namespace %s: %w", path, err)
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("join network namespace %s: %w", path, err)
		}
		return nil
	})
}

// startNetns starts the thread of a Netns, which enter moves into its
// namespace.
func startNetns(enter func() error) (*Netns, error) {
	n := &Netns{work: make(chan func()), done: make(chan struct{}), spare: map[int][]int{}}
	ready := make(chan error, 1)
	go n.run(enter, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return n, nil
}

// run is the namespace's thread: a thread of the runtime's, locked to the
// goroutine, moved into the namespace by enter, and moved back into its own once
// the Netns is closed, before it goes back to the runtime. It must not end
// with the goroutine instead: the processes it started have a
// parent-death signal, which a thread's end sends (PR_SET_PDEATHSIG) —
// and so would that of any thread that had started a process before.
func (n *Netns) run(enter func() error, ready chan<- error) {
	runtime.LockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		ready <- fmt.Errorf("open this thread's network namespace: %w", err)
		return
	}
	defer unix.Close(home)
	if err := enter(); err != nil {
		// A failed unshare or setns leaves the thread where it was.
		runtime.UnlockOSThread()
		ready <- err
		return
	}
	// Done only once the thread is home (the deferred calls run last
	// first): Close returns with no thread left in the namespace.
	defer close(n.done)
	defer func() {
		// A thread that can't go home stays locked, and the runtime
		// ends it with the goroutine.
		if unix.Setns(home, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
	}()
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		ready <- fmt.Errorf("open the network namespace: %w", err)
		return
	}
	n.fd, n.tid = fd, unix.Gettid()
	ready <- nil
	for fn := range n.work {
		fn()
	}
}

// FD returns a file descriptor of the namespace, for netlink and nftables
// connections to it; it is valid until Close.
func (n *Netns) FD() int { return n.fd }

// Path returns the path by which another process of the machine (root, or
// of closingtime's user namespace) opens the namespace while the Netns is
// open: the namespace of its thread, in /proc.
func (n *Netns) Path() string {
	return fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), n.tid)
}

// Do runs fn on the namespace's thread and returns when it has: what fn
// makes (a socket, a netlink connection, a process) is made inside the
// namespace. fn must not block for long: it holds up every other call.
// Once the Netns is closed, Do runs nothing and returns ErrClosed.
func (n *Netns) Do(fn func()) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return ErrClosed
	}
	finished := make(chan struct{})
	n.work <- func() {
		defer close(finished)
		fn()
	}
	<-finished
	return nil
}

// Start starts cmd inside the namespace; see exec.Cmd.Start. The process
// gets the parent-death signal its SysProcAttr asks for (Pdeathsig) when
// closingtime ends, not when the Netns is closed.
func (n *Netns) Start(cmd *exec.Cmd) error {
	var err error
	if derr := n.Do(func() { err = cmd.Start() }); derr != nil {
		return derr
	}
	return err
}

// Close moves the namespace's thread out and closes its descriptor, once
// the calls under way have returned; later calls return ErrClosed. Once
// the processes started in it are gone too, the kernel frees the namespace
// and every interface in it. Later calls of Close do nothing.
func (n *Netns) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	close(n.work)
	<-n.done
	// Unlocked first: socket holds n.sockets while it waits in Do.
	n.mu.Unlock()
	n.sockets.Lock()
	for _, fds := range n.spare {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	n.spare = nil
	n.sockets.Unlock()
	return unix.Close(n.fd)
}

// socket returns a non-blocking TCP socket of family made in the
// namespace, one of a batch made ahead.
func (n *Netns) socket(family int) (int, error) {
	n.sockets.Lock()
	defer n.sockets.Unlock()
	if len(n.spare[family]) == 0 {
		var made []int
		var err error
		derr := n.Do(func() {
			// Stops at the first failure: made holds the sockets before it.
			for range socketBatch {
				var fd int
				if fd, err = newSocket(family); err != nil {
					return
				}
				made = append(made, fd)
			}
		})
		if derr != nil {
			return -1, derr
		}
		if len(made) == 0 {
			return -1, err
		}
		n.spare[family] = made
	}
	fds := n.spare[family]
	fd := fds[len(fds)-1]
	n.spare[family] = fds[:len(fds)-1]
	return fd, nil
}
