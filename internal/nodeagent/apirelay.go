package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/closingtime-dev/closingtime/internal/cluster/local"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// PodKubeconfigFile is the name of the pods' kubeconfig
// (cluster.PodKubeconfigEnv), which [StartNodes] writes in the directory of the API
// server's kubeconfig (NodesConfig.Kubeconfig) and Close removes.
const PodKubeconfigFile = "pods-kubeconfig"

// apiDialTimeout bounds the relay's connect to the API server.
const apiDialTimeout = 10 * time.Second

// apiRelay carries the connections of pods to the API server, which
// listens on the machine's loopback interface, out of reach of a pod's
// network: it listens on a host of the network outside every node
// (podnet.Network.ListenOutside) and relays each connection, TLS and all,
// to the API server. kubeconfig is a copy of the API server's kubeconfig
// that names the relay, with the server's own name for TLS.
type apiRelay struct {
	ln         net.Listener
	kubeconfig string // the pods' kubeconfig, removed at close
	ctx        context.Context
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

// startAPIRelay starts relaying connections from nw to server, the API
// server's URL, and writes the pods' kubeconfig beside kubeconfig, the API
// server's.
func startAPIRelay(nw *podnet.Network, kubeconfig, server string) (*apiRelay, error) {
	u, err := url.Parse(server)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("nodes: kubeconfig %s: server %q is not a URL with a host", kubeconfig, server)
	}
	ln, err := nw.ListenOutside(0)
	if err != nil {
		return nil, fmt.Errorf("nodes: relay to the API server: %w", err)
	}
	r := &apiRelay{ln: ln}
	if r.kubeconfig, err = writePodKubeconfig(kubeconfig, ln.Addr().String()); err != nil {
		ln.Close()
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Go(func() { r.serve(u.Host) })
	return r, nil
}

// serve relays each connection the listener accepts to apiHost, until
// the listener is closed.
func (r *apiRelay) serve(apiHost string) {
	d := net.Dialer{Timeout: apiDialTimeout}
	// One connection per round; the loop ends when the listener is closed.
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Go(func() {
			up, err := d.DialContext(r.ctx, "tcp", apiHost)
			if err != nil {
				c.Close()
				return
			}
			local.Relay(r.ctx, c, up)
		})
	}
}

// close stops the relay, ends every connection it carries and removes the
// pods' kubeconfig.
func (r *apiRelay) close() error {
	r.cancel()
	err := r.ln.Close()
	r.wg.Wait()
	return errors.Join(err, os.Remove(r.kubeconfig))
}

// writePodKubeconfig writes a copy of the kubeconfig at path whose
// clusters' server is relay, a host:port, with the server's own host name
// checked against the API server's certificate, as PodKubeconfigFile in
// path's directory, and returns that file's path.
func writePodKubeconfig(path, relay string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return "", fmt.Errorf("nodes: kubeconfig %s: %w", path, err)
	}
	for name, c := range cfg.Clusters {
		u, err := url.Parse(c.Server)
		if err != nil || u.Host == "" {
			return "", fmt.Errorf("nodes: kubeconfig %s: cluster %s: server %q is not a URL with a host", path, name, c.Server)
		}
		if c.TLSServerName == "" {
			c.TLSServerName = u.Hostname()
		}
		u.Host = relay
		c.Server = u.String()
	}
	out := filepath.Join(filepath.Dir(path), PodKubeconfigFile)
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		os.Remove(out)
		return "", fmt.Errorf("nodes: the pods' kubeconfig: %w", err)
	}
	return out, nil
}
