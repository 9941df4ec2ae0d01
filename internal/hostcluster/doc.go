// Package hostcluster runs `closingtime cluster`: a real Kubernetes
// control plane on this machine (etcd, kube-apiserver and
// kube-controller-manager, from internal/controlplane) whose nodes are
// closingtime's node agents (internal/nodeagent), with pods as local
// processes, run by a daemon that outlives the command that started it.
//
// [Up] starts the daemon — this binary run as `closingtime cluster run`,
// the command line that calls [Run] — in a session of its own, and waits
// until the API server and every node are ready. [Down] stops the daemon,
// which kills every pod and then the control plane, and kills whatever is
// left in its session. [Status] reports the cluster, with its nodes and
// node ports as the API server lists them.
//
// The daemon and the commands meet in a state directory
// ([Config.StateDir]). The daemon records its [State] there at each phase,
// atomically, beside its log, the administrator's kubeconfig and the
// control plane's files. Up and Down hold the directory's lock while they
// start or stop a cluster, so that two at once start one. A state whose
// daemon is gone (a crash, a kill -9, a reboot) is stale: the daemon's PID
// counts only with the start time recorded for it, read from
// /proc/PID/stat, so that a later program given the same PID is not taken
// for the daemon, and what is left of the daemon's session is killed
// before the state is cleared.
//
// It runs on Linux only: processes are found through /proc
// (proc_linux.go), and the pods are internal/cluster/local's processes.
package hostcluster
