// Package load is the open-loop load generator behind `closingtime load`.
//
// A [Generator] sends requests at a constant rate for each of its clients:
// each request starts at its scheduled time whatever the earlier ones are
// doing, so a server that stalls cannot slow the generator down and hide
// its own stall (no coordinated omission). Two client kinds model the two
// habits that the seeds measure: [NewConn] dials a connection for each
// request, as a script or a probe does; [KeepAlive] holds a pool of
// persistent connections, as a backend-for-frontend does.
//
// Every request is sorted into a [Class] from the socket error itself
// (errnos, *net.OpError, io.EOF, deadlines), never from error text, and
// counted per client and per second. The clients speak HTTP/1.1 on their
// own connections and never resend a request by themselves; with
// [Config.Retry] set, the retry package's Transport resends what is safe,
// and the requests that a retry saved are reported as absorbed, with the
// class of their first failure. A request whose failed attempt went on a
// reused keep-alive connection is followed at once by one probe on a new
// connection ([Reprobe]), recorded with it but not counted, which tells a
// failure of that connection from an outage of the Service.
package load
