// Package proxyrules writes one node's Service rules into the kernel's
// nftables, in the shape kube-proxy's nftables mode gives them
// (kubernetes/kubernetes pkg/proxy/nftables/proxier.go), so that a new
// connection to a ClusterIP or a node port is sent to an endpoint by the
// kernel, and conntrack keeps every established connection on the
// endpoint it was sent to, however the rules change after.
//
// [Rules] owns the table "ip closingtime" of one network namespace.
// [Rules.Sync] takes the node's whole routing view, each Service port with
// the endpoints already chosen for it, and writes what changed since the
// last Sync in one netlink transaction, which the kernel applies at once,
// but for a packet that a transaction overtakes on its way through the
// chains (see the service chains below).
//
// What it mirrors of kube-proxy, by chain:
//
//   - nat-prerouting and nat-output (priority dstnat) jump to services,
//     which looks up "ip daddr . meta l4proto . th dport" in the verdict
//     map service-ips (ClusterIP ports with endpoints) and, for a local
//     destination other than 127.0.0.0/8, "meta l4proto . th dport" in
//     service-nodeports.
//   - service-<hash>-ns/name/tcp/port, one per Service port with
//     endpoints: marks for masquerading a connection from outside the pod
//     range, sends a client of sessionAffinity ClientIP to the endpoint
//     its address is remembered for, and else picks an endpoint with
//     "numgen random mod N" in a verdict map, or, with one endpoint, goes
//     to its chain without a map (kube-proxy, since
//     kubernetes/kubernetes#140723, DNATs to a Service's only endpoint in
//     the service chain itself, where it has no affinity). After the
//     pick, one rule more than kube-proxy's: a goto the first endpoint. The
//     kernel reads a packet's rules at the generation it began with but
//     looks up a set at the current one, so that a packet overtaken by a
//     transaction that rewrote the chain finds no element in the old
//     pick's map, which went with its rule, and would leave without a
//     DNAT, for cluster-ips-check to reject: about one connect in 90,000,
//     with endpoints changing every 5 ms, before the goto caught it.
//   - external-<hash>-… for a node port: marks every connection for
//     masquerading, then goes to the service chain, as kube-proxy's for
//     externalTrafficPolicy Cluster, or, where the node port's endpoints
//     are not the ClusterIP's (internalTrafficPolicy Local), picks among
//     them itself as the service chain does.
//   - endpoint-<hash>-…__ip/port, one per endpoint of a Service port:
//     marks the endpoint's own connections to itself for masquerading
//     (hairpin), remembers the client's address in the set
//     affinity-<hash>-… with sessionAffinity ClientIP, and DNATs to the
//     endpoint.
//   - filter-input, filter-forward and filter-output (priority dstnat-10)
//     send new connections through service-endpoints-check, whose map
//     no-endpoint-services rejects (goto reject-chain: the client sees a
//     refused connect) or drops (the connect times out) a ClusterIP port
//     without endpoints, and, on input, nodeport-endpoints-check with
//     no-endpoint-nodeports for node ports. filter-forward and
//     filter-output-post-dnat (dstnat+10) reject, in cluster-ips-check, a
//     connection to a ClusterIP on a port no Service has.
//   - nat-postrouting (srcnat) jumps to masquerading, which clears the
//     mark 0x4000 that mark-for-masquerade set and masquerades
//     fully-random.
//
// Like kube-proxy's partial syncs, a Sync writes only the Services that
// changed, and a changed chain is written anew, except a chain of affinity
// rules, which is edited rule by rule: each rule written costs the kernel
// a search of the table's sets by name.
//
// What it leaves out: IPv6, UDP and SCTP, LoadBalancer and external IPs
// (and so LoadBalancerSourceRanges), externalTrafficPolicy Local, the
// drop of traffic to unallocated addresses of the Service range, and the
// topology and traffic-distribution choice of endpoints, which the caller
// makes.
//
// A chain that a Sync unlinks (an endpoint's, a Service's) is emptied in
// its transaction and deleted by the first Sync a second later, as
// kube-proxy deletes its stale chains (for kernels before 6.2, which
// refuse to delete a chain still in use).
package proxyrules
