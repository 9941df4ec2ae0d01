// Package diagnosis names the cause of every failed request of a run, and
// its fix. It joins each failed or absorbed request to the run's timeline:
// the connection the request used, the pod that connection reached, what
// that pod was doing when the connection was made and when the request
// failed (starting, ready, in its preStop hook, signalled, exited, killed),
// and whether the Service's endpoints and each node's routing view still
// listed it. Rules read that evidence and give the request one cause of
// a fixed list ([Causes]), each tied to the scenario of the catalog that
// shows it, to a fix and to the lint rule that prevents it; evidence that
// no rule explains stays [Unknown]. It also tells, for each pod the action
// ended, how it stopped ([results.Finding]): a signal ignored, a grace
// period lived out, requests served after SIGTERM.
//
// A diagnosis reads only a [results.Run], so it is the same for every
// backend and for results read back from a file: the embedded cluster, a
// closingtime cluster and a real one differ only in what their timelines
// hold, and a real cluster, which shows no node's routing view and routes
// through a Service address, leaves some causes to be inferred; the
// diagnosis's Limits say which.
package diagnosis
