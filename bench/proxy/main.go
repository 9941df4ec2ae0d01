// Command proxybench measures `closingtime proxy` against NGINX, as a
// reverse proxy to the same upstream (`closingtime serve --work 0s`), in
// the same run on this machine:
//
//   - the latency it adds: the p99 of `closingtime load` at -rate requests
//     per second on keep-alive connections, through each proxy, less the
//     p99 straight to the upstream;
//   - its throughput: the requests per second that -conns closed-loop
//     keep-alive clients get through it for -duration, and the ratio to
//     NGINX's.
//
// NGINX runs with what ingress-NGINX gives it for this: an upstream
// keep-alive pool (keepalive 320, HTTP/1.1 with an empty Connection
// header) and one worker per core. Each proxy runs in its own process.
//
// Run it with bench/proxy.sh, which installs Debian's NGINX if it is
// missing, or from this directory:
//
//	go run . -closingtime /path/to/closingtime
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(1)
	}
}

func run() error {
	closingtime := flag.String("closingtime", "closingtime", "the closingtime binary")
	nginx := flag.String("nginx", "nginx", "the NGINX binary")
	rate := flag.Float64("rate", 1500, "requests per second of the latency measurement")
	duration := flag.Duration("duration", 10*time.Second, "length of each measurement")
	conns := flag.Int("conns", 64, "closed-loop clients of the throughput measurement")
	flag.Parse()

	tmp, err := os.MkdirTemp("", "proxybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	var procs []*exec.Cmd
	defer func() {
		for _, p := range procs {
			// SIGTERM: NGINX's master stops its workers before it exits,
			// where a SIGKILL would leave them behind.
			p.Process.Signal(syscall.SIGTERM)
			p.Wait()
		}
	}()
	start := func(name string, args ...string) (string, error) {
		addr, cmd, err := startLogged(name, args...)
		if cmd != nil {
			procs = append(procs, cmd)
		}
		return addr, err
	}
	upstream, err := start(*closingtime, "serve", "--listen", "127.0.0.1:0", "--work", "0s", "--pod-name", "upstream")
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	edge, err := start(*closingtime, "proxy", "--role", "edge", "--upstreams", upstream, "--listen", "127.0.0.1:0", "--admin", "none")
	if err != nil {
		return fmt.Errorf("edge: %w", err)
	}
	sidecar, err := start(*closingtime, "proxy", "--upstream", upstream, "--listen", "127.0.0.1:0", "--admin", "none")
	if err != nil {
		return fmt.Errorf("sidecar: %w", err)
	}
	ngx, cmd, err := startNGINX(*nginx, tmp, upstream)
	if cmd != nil {
		procs = append(procs, cmd)
	}
	if err != nil {
		return fmt.Errorf("nginx: %w", err)
	}

	targets := []struct{ name, addr string }{{"upstream", upstream}, {"edge", edge}, {"sidecar", sidecar}, {"nginx", ngx}}
	fmt.Printf("latency at %g requests/s, keep-alive, %s each (closingtime load):\n", *rate, *duration)
	p99 := map[string]float64{}
	for _, t := range targets {
		ms, err := loadP99(*closingtime, "http://"+t.addr+"/work", *rate, *duration)
		if err != nil {
			return fmt.Errorf("load through %s: %w", t.name, err)
		}
		p99[t.name] = ms
		added := ""
		if t.name != "upstream" {
			added = fmt.Sprintf(", adds %.3f ms", ms-p99["upstream"])
		}
		fmt.Printf("  %-8s p99 %.3f ms%s\n", t.name, ms, added)
	}
	fmt.Printf("throughput, %d closed-loop keep-alive clients, %s each:\n", *conns, *duration)
	rps := map[string]float64{}
	for _, t := range targets[1:] {
		n, failed := closedLoop("http://"+t.addr+"/work", *conns, *duration)
		rps[t.name] = float64(n) / duration.Seconds()
		fmt.Printf("  %-8s %8.0f requests/s (%d failed)\n", t.name, rps[t.name], failed)
	}
	fmt.Printf("edge/nginx %.2f, sidecar/nginx %.2f\n", rps["edge"]/rps["nginx"], rps["sidecar"]/rps["nginx"])
	return nil
}

// startLogged starts a closingtime command that logs JSON lines and
// returns the address of its "listening" event.
func startLogged(name string, args ...string) (string, *exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var e struct{ Event, Address string }
			if json.Unmarshal(sc.Bytes(), &e) == nil && e.Event == "listening" {
				addr <- e.Address
			}
		}
	}()
	select {
	case a := <-addr:
		return a, cmd, nil
	case <-time.After(10 * time.Second):
		return "", cmd, errors.New("no listening event in 10s")
	}
}

// startNGINX starts NGINX as a reverse proxy to upstream on a free
// loopback port, its files in dir, and returns its address.
func startNGINX(nginx, dir, upstream string) (string, *exec.Cmd, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := filepath.Join(dir, "nginx.conf")
	err = os.WriteFile(conf, fmt.Appendf(nil, `daemon off;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  upstream app {
    server %[2]s;
    keepalive 320;
  }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`, dir, upstream, addr), 0o644)
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(nginx, "-c", conf, "-e", "stderr")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, cmd, nil
		}
	}
	return "", cmd, errors.New("not listening after 10s")
}

// loadP99 runs `closingtime load` against url and returns its p99
// latency in milliseconds; a failed request is an error.
func loadP99(closingtime, url string, rate float64, d time.Duration) (float64, error) {
	out, err := exec.Command(closingtime, "load", "--client", fmt.Sprintf("keep-alive=%g", rate), "--connections", "64",
		"--duration", d.String(), "-o", "json", url).Output()
	if err != nil {
		return 0, err
	}
	var report struct {
		Clients []struct {
			Totals    map[string]int64
			LatencyMs struct{ P99 float64 } `json:"latencyMs"`
		}
	}
	if err := json.Unmarshal(out, &report); err != nil {
		return 0, err
	}
	c := report.Clients[0]
	for class, n := range c.Totals {
		if class != "ok" && n > 0 {
			return 0, fmt.Errorf("%d %s", n, class)
		}
	}
	return c.LatencyMs.P99, nil
}

// closedLoop sends requests to url from conns clients, each on a
// keep-alive connection of its own, each the next as soon as the last is
// answered, for d, and returns the requests answered 200 and the others.
func closedLoop(url string, conns int, d time.Duration) (ok, failed int64) {
	var okN, failedN atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range conns {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1}, Timeout: 10 * time.Second}
			defer client.CloseIdleConnections()
			for time.Now().Before(stop) {
				resp, err := client.Get(url)
				if err != nil {
					failedN.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					okN.Add(1)
				} else {
					failedN.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return okN.Load(), failedN.Load()
}
