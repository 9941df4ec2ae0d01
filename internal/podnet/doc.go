// Package podnet gives pods a network of their own, as a CNI bridge
// plugin does on a real node, with no file left on the machine and no
// address, route or rule in the machine's own network namespace.
//
// A [Network] is a cluster's network: a switch namespace that joins its
// nodes, and per node a [NetnsNode], a network namespace with a bridge
// (cbr0) for its pods, the node's address on the switch, and a route to
// each other node's pod range. [NetnsNode.NewSandbox] makes a pod's
// sandbox: a network namespace of its own with its loopback interface and
// one interface, eth0, a veth whose other end joins the node's bridge,
// holding the pod's address. All of a pod's containers start in it
// ([Sandbox.Start]), so that two pods can bind the same port and a
// container reaches its pod's other containers on localhost. When the
// sandbox is closed its interface goes: a connection to its address that a
// node still sends there gets no answer, as on a node whose CNI plugin has
// released the address.
//
// closingtime itself stays in the machine's namespace and reaches into a
// cluster's namespaces through sockets: a socket keeps the namespace it was
// made in, and each [Netns] has one OS thread inside it that makes them
// ([Netns.DialContext], [Netns.Listen]). A namespace is held by that thread
// and a file descriptor only, never by a mount, so the kernel frees it, and
// every interface in it, when closingtime closes it or dies, however it
// dies (once the processes started in it are gone: they die with
// closingtime too, by their parent-death signal).
//
// Where network namespaces can't be made (no CAP_SYS_ADMIN), a
// [LoopbackNode] stands in: each pod gets an address of its own on the
// loopback range and shares the machine's network.
package podnet
