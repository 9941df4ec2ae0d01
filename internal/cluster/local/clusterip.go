package local

import (
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// clusterIPs hands out the cluster IPs of Services, as the API server's
// allocator does for a Service without one: from the Service range, in
// order here, for repeatable runs, where the API server picks at random.
type clusterIPs struct {
	cidr netip.Prefix
	used map[netip.Addr]string // by the Service's namespace/name
	next netip.Addr
}

func newClusterIPs(cidr netip.Prefix) *clusterIPs {
	// The range's first address is the network's, its second the API
	// server's own Service.
	return &clusterIPs{cidr: cidr, used: map[netip.Addr]string{}, next: cidr.Addr().Next().Next()}
}

// assign gives svc a cluster IP unless it is headless or of type
// ExternalName: the one of old, the Service it replaces, since a Service's
// cluster IP never changes; else the one it asks for, if the range hands it
// out and no other Service holds it; else a free one. It is called with
// the cluster's lock held.
func (a *clusterIPs) assign(svc, old *corev1.Service) error {
	want := svc.Spec.ClusterIP
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil // a name, not an address
		return nil
	}
	name := svc.Namespace + "/" + svc.Name
	if old != nil && old.Spec.ClusterIP != "" {
		if want != "" && want != old.Spec.ClusterIP {
			return fmt.Errorf("spec.clusterIP: %s: the field is immutable (it is %s)", want, old.Spec.ClusterIP)
		}
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = old.Spec.ClusterIP, old.Spec.ClusterIPs
		return nil
	}
	if want == corev1.ClusterIPNone {
		return nil
	}
	if want != "" {
		ip, err := netip.ParseAddr(want)
		switch {
		case err != nil || !a.handsOut(ip):
			return fmt.Errorf("spec.clusterIP: %s: not an address of the Service range %s that a Service can have", want, a.cidr)
		case a.used[ip] != "" && a.used[ip] != name:
			return fmt.Errorf("spec.clusterIP: %s: already held by Service %s", want, a.used[ip])
		}
		a.used[ip] = name
		svc.Spec.ClusterIPs = []string{want}
		return nil
	}
	// From the last one handed out to the range's end: the cluster never
	// deletes a Service.
	for ip := a.next; a.handsOut(ip); ip = ip.Next() {
		if a.used[ip] == "" {
			a.used[ip], a.next = name, ip.Next()
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip.String(), []string{ip.String()}
			return nil
		}
	}
	return fmt.Errorf("no free cluster IP in %s", a.cidr)
}

// handsOut reports whether ip is an address of the range that a Service
// can have: neither the range's first (the network's), its second (the
// API server's own Service) nor its last.
func (a *clusterIPs) handsOut(ip netip.Addr) bool {
	first := a.cidr.Masked().Addr()
	return a.cidr.Contains(ip) && ip != first && ip != first.Next() && a.cidr.Contains(ip.Next())
}

// validService checks what the API server's validation checks of svc's
// ports and that the node proxies' rules need: ports from 1 to 65535, a
// name on each port of a Service of several, unique; node ports unique
// among the Services of the cluster (others).
func validService(svc *corev1.Service, others map[string]*corev1.Service) error {
	names := map[string]bool{}
	for i, p := range svc.Spec.Ports {
		field := fmt.Sprintf("spec.ports[%d]", i)
		switch {
		case p.Port < 1 || p.Port > 65535:
			return fmt.Errorf("%s.port: %d: want 1 to 65535", field, p.Port)
		case len(svc.Spec.Ports) > 1 && p.Name == "":
			return fmt.Errorf("%s.name: a Service of several ports must name each", field)
		case names[p.Name]:
			return fmt.Errorf("%s.name: %q: another port has that name", field, p.Name)
		case p.NodePort < 0 || p.NodePort > 65535:
			return fmt.Errorf("%s.nodePort: %d: want 1 to 65535", field, p.NodePort)
		}
		names[p.Name] = true
		if p.NodePort == 0 {
			continue
		}
		for j, q := range svc.Spec.Ports[:i] {
			if q.NodePort == p.NodePort {
				return fmt.Errorf("%s.nodePort: %d: port %d has it too", field, p.NodePort, j)
			}
		}
		for _, o := range others {
			if o.Namespace == svc.Namespace && o.Name == svc.Name {
				continue
			}
			for _, q := range o.Spec.Ports {
				if q.NodePort == p.NodePort {
					return fmt.Errorf("%s.nodePort: %d: Service %s/%s has it", field, p.NodePort, o.Namespace, o.Name)
				}
			}
		}
	}
	return nil
}
