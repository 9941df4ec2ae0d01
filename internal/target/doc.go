// Package target is the lab server behind `closingtime serve`: an HTTP
// server whose way of dying is a setting, so that each termination
// behaviour measured in the seeds can be reproduced with real processes,
// signals and TCP.
//
// [Run] starts one process as a [Config] describes it. The server waits out
// a start-up delay, listens, and answers:
//
//   - /work after the work time, 200;
//   - /ready 200 while serving, 503 from SIGTERM on in ModeGraceful and
//     ModeHostage;
//   - /live 200 while the process answers;
//   - /health-deep 200 if the dependency answered 2xx within its timeout,
//     503 otherwise;
//   - / the configuration as JSON.
//
// Every response carries the pod's name in X-Pod-Name and echoes the
// request's X-Request-Id.
//
// On SIGTERM the server behaves as its [Mode] says: [ModeExit] leaves at
// once, [ModeGraceful] drains through the graceful package, [ModeHostage]
// keeps busy keep-alive connections as Node's server.close() does, and
// [ModeIgnore] has no handler at all, leaving the signal to the kernel's
// rules for PID 1. A [Wrapper] runs the server as a grandchild under a
// process that behaves like `npm start` or `sh -c` as a container's first
// process.
//
// The log is one line per event, JSON by default, each with "time"
// (milliseconds, UTC), "event" and "pod": started, listening, sigterm,
// listener_closed, drained, exiting, crash, request, and the wrapper's wrapper_started,
// wrapper_signal and wrapper_exiting. docs/serve.md lists their fields,
// whose names are stable.
package target
