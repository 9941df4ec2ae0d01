package kube

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// follow starts reading the log of the running instance of container in
// pod, restart being its restart count, from its first line until it
// ends, into the container's buffer. Called with c.mu held.
func (c *Cluster) follow(namespace, pod, container string, restart int32) {
	key := namespace + "/" + pod + "/" + container
	b := c.logs[key]
	if b == nil {
		b = cluster.NewLogBuffer(cluster.DefaultMaxLogLines)
		c.logs[key] = b
	}
	c.wg.Go(func() {
		req := c.client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true})
		r, err := req.Stream(c.ctx)
		if err != nil {
			if c.ctx.Err() == nil {
				b.Add(cluster.LogLine{Time: c.clock.Now(), Restart: restart, Text: "closingtime: follow log: " + err.Error()})
			}
			return
		}
		defer r.Close()
		c.readLog(b, r, restart)
	})
}

// readLog appends the lines of r to b until r ends or the cluster closes.
// The API merges stdout and stderr, so Stream is empty.
func (c *Cluster) readLog(b *cluster.LogBuffer, r io.Reader, restart int32) {
	if err := b.Capture(r, c.clock, "", restart); err != nil && c.ctx.Err() == nil {
		b.Add(cluster.LogLine{Time: c.clock.Now(), Restart: restart, Text: "closingtime: read log: " + err.Error()})
	}
}

// Logs returns the lines container wrote in pod, of every instance the
// backend saw start, oldest first, as the backend read them while
// following the log; they stay after the pod is gone. A container the
// backend never saw running is an error that wraps cluster.ErrNotFound.
func (c *Cluster) Logs(ctx context.Context, namespace, pod, container string) ([]cluster.LogLine, error) {
	c.mu.Lock()
	b := c.logs[namespace+"/"+pod+"/"+container]
	c.mu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("logs of container %s of pod %s/%s: %w", container, namespace, pod, cluster.ErrNotFound)
	}
	return b.Lines(), nil
}
