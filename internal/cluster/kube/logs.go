package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// DefaultMaxLogLines is how many lines the backend keeps of each
// container, across its restarts.
const DefaultMaxLogLines = 100_000

// maxLogLineBytes is the longest line kept whole; a longer one is split.
const maxLogLineBytes = 64 << 10

// logBuffer keeps the latest lines of a container, across restarts.
type logBuffer struct {
	mu    sync.Mutex
	lines []cluster.LogLine
}

// append adds l, dropping the oldest half of the lines beyond twice
// DefaultMaxLogLines at once, so that dropping costs O(1) a line.
func (b *logBuffer) append(l cluster.LogLine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.lines) >= 2*DefaultMaxLogLines {
		b.lines = slices.Clone(b.lines[len(b.lines)-DefaultMaxLogLines:])
	}
	b.lines = append(b.lines, l)
}

// lastLines returns a copy of the latest DefaultMaxLogLines lines.
func (b *logBuffer) lastLines() []cluster.LogLine {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.lines[max(0, len(b.lines)-DefaultMaxLogLines):])
}

// follow starts reading the log of the running instance of container in
// pod, restart being its restart count, from its first line until it
// ends, into the container's buffer. Called with c.mu held.
func (c *Cluster) follow(namespace, pod, container string, restart int32) {
	key := namespace + "/" + pod + "/" + container
	b := c.logs[key]
	if b == nil {
		b = &logBuffer{}
		c.logs[key] = b
	}
	c.wg.Go(func() {
		req := c.client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, Follow: true})
		r, err := req.Stream(c.ctx)
		if err != nil {
			if c.ctx.Err() == nil {
				b.append(cluster.LogLine{Time: c.clock.Now(), Restart: restart, Text: "closingtime: follow log: " + err.Error()})
			}
			return
		}
		defer r.Close()
		c.readLog(b, r, restart)
	})
}

// readLog appends the lines of r to b until r ends or the cluster closes.
// The API merges stdout and stderr, so Stream is empty.
func (c *Cluster) readLog(b *logBuffer, r io.Reader, restart int32) {
	br := bufio.NewReaderSize(r, maxLogLineBytes)
	// Each round reads one line or a full buffer; the loop ends at EOF or
	// an error.
	for {
		line, err := br.ReadSlice('\n')
		if n := len(line); n > 0 {
			if line[n-1] == '\n' {
				line = line[:n-1]
			}
			b.append(cluster.LogLine{Time: c.clock.Now(), Restart: restart, Text: string(line)})
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF), c.ctx.Err() != nil:
			return
		default:
			b.append(cluster.LogLine{Time: c.clock.Now(), Restart: restart, Text: "closingtime: read log: " + err.Error()})
			return
		}
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
	return b.lastLines(), nil
}
