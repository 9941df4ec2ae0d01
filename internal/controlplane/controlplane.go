package controlplane

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// controllers are the controllers that the kube-controller-manager runs:
// those of Deployments, ReplicaSets, EndpointSlices and
// PodDisruptionBudgets, and those that admission, namespaces and garbage
// collection need. There is no scheduler and no node lifecycle
// controller: nothing binds, taints or evicts pods by itself.
var controllers = []string{
	"deployment-controller", "replicaset-controller", "endpointslice-controller", "disruption-controller",
	"serviceaccount-controller", "serviceaccount-token-controller", "garbage-collector-controller",
	"namespace-controller", "root-ca-certificate-publisher-controller",
}

// ServiceCIDR is the range the API server gives Services their cluster IP
// from: the embedded cluster's, which the node agents' rules route in
// their nodes' namespaces, and nothing routes on the machine.
const ServiceCIDR = cluster.DefaultServiceCIDR

// startTimeout bounds the start of each process, until it is healthy.
const startTimeout = 2 * time.Minute

// stopTimeout is how long Stop waits for a process after SIGTERM before
// it kills it.
const stopTimeout = 10 * time.Second

// Config configures [Start].
type Config struct {
	// Binaries are the programs to run, from Build.
	Binaries Binaries
	// Dir holds the control plane's certificates, kubeconfigs, etcd data
	// and logs (logs/<program>.log). It must exist; it is left in place.
	Dir string
}

// ControlPlane is a running etcd, kube-apiserver and
// kube-controller-manager on free loopback ports: a Kubernetes control
// plane without a scheduler, kubelets or kube-proxy, so that pods stay
// Pending until a client binds them (pods/binding) and sets their status
// as a kubelet would.
type ControlPlane struct {
	// Kubeconfig is the path of a kubeconfig whose current context is an
	// administrator (group system:masters) of the cluster.
	Kubeconfig string
	// Server is the API server's URL.
	Server string
	// Dir is Config.Dir.
	Dir string

	procs []*process // in start order
}

// process is a program of the control plane.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	log  string
}

// Start starts the control plane, and returns once each program is
// healthy: etcd, the API server's /readyz, the controller manager's
// /healthz. If ctx ends or a program fails first, what started is stopped.
// Stop stops it.
func Start(ctx context.Context, cfg Config) (*ControlPlane, error) {
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{Dir: cfg.Dir, Server: "https://127.0.0.1:" + ports[2], Kubeconfig: filepath.Join(cfg.Dir, "admin.kubeconfig")}
	if err := cp.start(ctx, cfg, ports); err != nil {
		cp.Stop()
		return nil, err
	}
	return cp, nil
}

// start does Start's work; what it started is in cp.procs.
func (cp *ControlPlane) start(ctx context.Context, cfg Config, ports []string) error {
	etcdClient, etcdPeer, apiPort, kcmPort, dir := ports[0], ports[1], ports[2], ports[3], cfg.Dir
	p, err := newPKI(dir)
	if err != nil {
		return fmt.Errorf("controlplane: certificates: %w", err)
	}
	for _, c := range []struct {
		name, cn string
		orgs     []string
		server   bool
	}{
		{"apiserver", "kube-apiserver", nil, true},
		{"controller-manager-serving", "kube-controller-manager", nil, true},
		{"admin", "closingtime", []string{"system:masters"}, false},
		{"controller-manager", "system:kube-controller-manager", []string{"system:masters"}, false},
		// The API server's client certificate for the kubelets' API
		// (logs), and the kubelets' serving certificate (KubeletTLS).
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false},
		{"kubelet", "closingtime-kubelet", nil, true},
	} {
		if err := p.issue(c.name, c.cn, c.orgs, c.server); err != nil {
			return fmt.Errorf("controlplane: certificate %s: %w", c.name, err)
		}
	}
	kcmConfig := filepath.Join(dir, "controller-manager.kubeconfig")
	for path, user := range map[string]string{cp.Kubeconfig: "admin", kcmConfig: "controller-manager"} {
		if err := writeKubeconfig(path, cp.Server, p, user); err != nil {
			return err
		}
	}
	client, err := p.httpClient()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return fmt.Errorf("controlplane: %w", err)
	}
	etcdURL := "http://127.0.0.1:" + etcdClient
	peerURL := "http://127.0.0.1:" + etcdPeer
	steps := []struct {
		name, bin, health string
		args              []string
	}{
		{"etcd", cfg.Binaries.Etcd, etcdURL + "/health", []string{
			"--name=controlplane", "--data-dir=" + filepath.Join(dir, "etcd"),
			"--listen-client-urls=" + etcdURL, "--advertise-client-urls=" + etcdURL,
			"--listen-peer-urls=" + peerURL, "--initial-advertise-peer-urls=" + peerURL,
			"--initial-cluster=controlplane=" + peerURL,
			"--unsafe-no-fsync", "--log-level=warn",
		}},
		{"kube-apiserver", cfg.Binaries.APIServer, cp.Server + "/readyz", []string{
			"--etcd-servers=" + etcdURL, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
			"--secure-port=" + apiPort,
			// The kubernetes Service's endpoints would be the loopback
			// address, which the API refuses to publish.
			"--endpoint-reconciler-type=none",
			"--tls-cert-file=" + p.path("apiserver.crt"), "--tls-private-key-file=" + p.path("apiserver.key"),
			"--client-ca-file=" + p.path("ca.crt"), "--authorization-mode=RBAC",
			// Nodes publish their kubelet API on their InternalIP
			// (KubeletTLS); the API server proves itself with a client
			// certificate and checks the kubelet's against the CA.
			"--kubelet-client-certificate=" + p.path("apiserver-kubelet-client.crt"),
			"--kubelet-client-key=" + p.path("apiserver-kubelet-client.key"),
			"--kubelet-certificate-authority=" + p.path("ca.crt"),
			"--kubelet-preferred-address-types=InternalIP",
			"--service-cluster-ip-range=" + ServiceCIDR,
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + p.path("sa.pub"), "--service-account-signing-key-file=" + p.path("sa.key"),
		}},
		{"kube-controller-manager", cfg.Binaries.ControllerManager, "https://127.0.0.1:" + kcmPort + "/healthz", []string{
			"--kubeconfig=" + kcmConfig, "--bind-address=127.0.0.1", "--secure-port=" + kcmPort,
			"--tls-cert-file=" + p.path("controller-manager-serving.crt"), "--tls-private-key-file=" + p.path("controller-manager-serving.key"),
			"--leader-elect=false", "--controllers=" + strings.Join(controllers, ","),
			"--service-account-private-key-file=" + p.path("sa.key"), "--root-ca-file=" + p.path("ca.crt"),
		}},
	}
	for _, s := range steps {
		proc, err := start(s.name, s.bin, filepath.Join(dir, "logs", s.name+".log"), s.args)
		if err != nil {
			return err
		}
		cp.procs = append(cp.procs, proc)
		if err := proc.waitHealthy(ctx, client, s.health); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the programs, the last started first: SIGTERM, then SIGKILL
// after stopTimeout. It returns when they have exited. Dir is left.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		p := cp.procs[i]
		p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(stopTimeout):
			p.cmd.Process.Kill()
			<-p.done
		}
	}
	cp.procs = nil
}

// KubeletTLS returns the TLS configuration of a node's kubelet API, which
// the API server reaches for pod logs on the node's InternalIP address
// and its status.daemonEndpoints.kubeletEndpoint.Port: the kubelet's
// serving certificate, which the control plane's CA signed for 127.0.0.1
// and localhost, and the requirement of a client certificate that the CA
// signed, such as the API server's (CN kube-apiserver-kubelet-client).
// It reads the certificates from Dir, so that it works in any process
// while Dir exists.
func (cp *ControlPlane) KubeletTLS() (*tls.Config, error) {
	p := &pki{dir: cp.Dir}
	cert, err := tls.LoadX509KeyPair(p.path("kubelet.crt"), p.path("kubelet.key"))
	if err != nil {
		return nil, fmt.Errorf("controlplane: kubelet certificate: %w", err)
	}
	ca, err := os.ReadFile(p.path("ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("controlplane: %s: no certificate", p.path("ca.crt"))
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS12}, nil
}

// start starts program bin with args, its output going to the file at log.
func start(name, bin, log string, args []string) (*process, error) {
	out, err := os.Create(log)
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	dieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("controlplane: start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		cmd.Wait()
		out.Close()
		close(p.done)
	}()
	return p, nil
}

// waitHealthy polls url until it answers 200 OK, the process exits, or
// startTimeout or ctx ends.
func (p *process) waitHealthy(ctx context.Context, client *http.Client, url string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// Each round asks once; the loop ends when healthy, or with an error.
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return fmt.Errorf("controlplane: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-tick.C:
		case <-p.done:
			return fmt.Errorf("controlplane: %s exited (%v) before it was healthy; its log ends:\n%s", p.name, p.cmd.ProcessState, tail(p.log))
		case <-ctx.Done():
			return fmt.Errorf("controlplane: %s not healthy at %s: %w; its log ends:\n%s", p.name, url, ctx.Err(), tail(p.log))
		}
	}
}

// tail returns the last lines of the file at path.
func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSpace(data), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-20):], []byte("\n")))
}

// httpClient returns a client that trusts the CA and presents the admin's
// certificate.
func (p *pki) httpClient() (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(p.path("admin.crt"), p.path("admin.key"))
	if err != nil {
		return nil, fmt.Errorf("controlplane: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}}}}, nil
}

// writeKubeconfig writes a kubeconfig for server whose user presents the
// client certificate user.crt of p.
func writeKubeconfig(path, server string, p *pki, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["controlplane"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(user + ".crt"), ClientKey: p.path(user + ".key")}
	cfg.Contexts["controlplane"] = &clientcmdapi.Context{Cluster: "controlplane", AuthInfo: user}
	cfg.CurrentContext = "controlplane"
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("controlplane: kubeconfig %s: %w", path, err)
	}
	return nil
}

// freePorts returns n distinct ports that are free on 127.0.0.1 now. A
// port can be taken between this and its use; Start then fails, naming
// the program that could not listen.
func freePorts(n int) ([]string, error) {
	var ports []string
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("controlplane: free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	}
	return ports, nil
}
