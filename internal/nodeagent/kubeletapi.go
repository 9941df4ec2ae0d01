package nodeagent

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/cluster/local"
)

// timestampFormat is the fixed-width RFC 3339 time that the kubelet puts
// before each line with timestamps=true (RFC3339NanoFixed in
// k8s.io/cri-client pkg/logs).
const timestampFormat = "2006-01-02T15:04:05.000000000Z07:00"

// KubeletHandler serves the part of the kubelet's API that the API server
// uses for pod logs, for the pods that k runs:
//
//   - GET /containerLogs/{namespace}/{pod}/{container} writes the log of
//     one instance of the container (see local.Kubelet.LogInstance), its
//     standard output and error merged in the order they were read, as
//     the API server asks it for `kubectl logs` and the pods/log
//     subresource. The query is the API server's, a v1.PodLogOptions:
//     previous (the last instance that terminated before the current
//     one), follow (go on writing each line as it comes, until the
//     instance exits), timestamps (each line prefixed by the time it was
//     read and a space), tailLines, limitBytes, and sinceSeconds or
//     sinceTime; stream only as All, as the kubelet without the
//     PodLogsQuerySplitStreams feature. The errors are the kubelet's: 404
//     for a pod or container k never ran, 400 for a query it cannot
//     decode or a container with no such instance, 422 for an invalid
//     query. Logs stay after the pod is gone, as k keeps them.
//   - GET /healthz answers "ok".
//
// The handler does no authentication: serve it over TLS that requires
// the API server's client certificate (controlplane.ControlPlane.KubeletTLS).
func KubeletHandler(k *local.Kubelet) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok"))
	})
	mux.HandleFunc("GET /containerLogs/{namespace}/{pod}/{container}", func(w http.ResponseWriter, r *http.Request) {
		containerLogs(k, w, r)
	})
	return mux
}

// containerLogs serves GET /containerLogs/{namespace}/{pod}/{container}
// as the kubelet's getContainerLogs does (k8s.io/kubernetes
// pkg/kubelet/server/server.go), and writes the lines as the runtime's log
// reader does (ReadLogs in k8s.io/cri-client pkg/logs).
func containerLogs(k *local.Kubelet, w http.ResponseWriter, r *http.Request) {
	opts, err := logOptions(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, `{"message": "Unable to decode query."}`)
		return
	}
	if !validLogOptions(opts) {
		writeError(w, http.StatusUnprocessableEntity, `{"message": "Invalid request."}`)
		return
	}
	// Without the PodLogsQuerySplitStreams feature, which is off by
	// default, the kubelet serves both streams together only.
	if opts.Stream != nil && *opts.Stream != corev1.LogStreamAll {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("unable to return the given log stream: %q. Please enable PodLogsQuerySplitStreams feature gate in kubelet", *opts.Stream))
		return
	}
	b, restart, err := k.LogInstance(r.PathValue("namespace"), r.PathValue("pod"), r.PathValue("container"), opts.Previous)
	if errors.Is(err, cluster.ErrNotFound) {
		writeError(w, http.StatusNotFound, err.Error())
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var since time.Time
	switch {
	case opts.SinceSeconds != nil:
		since = time.Now().Add(-time.Duration(*opts.SinceSeconds) * time.Second)
	case opts.SinceTime != nil:
		since = opts.SinceTime.Time
	}
	remain := ptr.Deref(opts.LimitBytes, math.MaxInt64) // bytes left to write
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	// The headers go out at once, so that the API server's client has
	// the stream before the first line.
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	first := true
	for batch := range b.Follow(r.Context(), restart) {
		// tailLines counts back from the end of what the instance has
		// written so far; a follower then gets every later line.
		if first && opts.TailLines != nil {
			batch = batch[max(0, len(batch)-int(*opts.TailLines)):]
		}
		first = false
		var out []byte
		for _, l := range batch {
			if l.Time.Before(since) {
				continue
			}
			line := []byte(l.Text + "\n")
			if opts.Timestamps {
				line = slices.Concat([]byte(l.Time.UTC().Format(timestampFormat)+" "), line)
			}
			// The limit cuts the line that reaches it.
			n := min(int64(len(line)), remain)
			out = append(out, line[:n]...)
			if remain -= n; remain == 0 {
				break
			}
		}
		if _, err := w.Write(out); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if !opts.Follow || remain == 0 {
			return
		}
	}
}

// writeError answers with code and msg as plain text, as the kubelet's
// errors are.
func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	io.WriteString(w, msg)
}

// logOptions decodes the query of a containerLogs request as the kubelet
// does: into a v1.PodLogOptions, with the API machinery's conversions of
// query parameters, and "tail" as the older name of tailLines ("all" for
// none).
func logOptions(query url.Values) (*corev1.PodLogOptions, error) {
	if tail := query["tail"]; len(tail) > 0 {
		query["tailLines"] = tail
		if tail[0] == "all" {
			delete(query, "tailLines")
		}
	}
	opts := &corev1.PodLogOptions{}
	var errs []error
	for name, into := range map[string]*bool{"follow": &opts.Follow, "previous": &opts.Previous, "timestamps": &opts.Timestamps} {
		if v := query[name]; len(v) > 0 {
			errs = append(errs, runtime.Convert_Slice_string_To_bool(&v, into, nil))
		}
	}
	for name, into := range map[string]**int64{"sinceSeconds": &opts.SinceSeconds, "tailLines": &opts.TailLines, "limitBytes": &opts.LimitBytes} {
		if v := query[name]; len(v) > 0 {
			errs = append(errs, runtime.Convert_Slice_string_To_Pointer_int64(&v, into, nil))
		}
	}
	if v := query["sinceTime"]; len(v) > 0 {
		errs = append(errs, metav1.Convert_Slice_string_To_Pointer_v1_Time(&v, &opts.SinceTime, nil))
	}
	if v := query["stream"]; len(v) > 0 {
		opts.Stream = &v[0]
	}
	return opts, errors.Join(errs...)
}

// validLogOptions reports whether opts are valid, as the kubelet checks
// them (ValidatePodLogOptions in k8s.io/kubernetes
// pkg/apis/core/v1/validation).
func validLogOptions(opts *corev1.PodLogOptions) bool {
	switch {
	case opts.TailLines != nil && *opts.TailLines < 0,
		opts.LimitBytes != nil && *opts.LimitBytes < 1,
		opts.SinceSeconds != nil && opts.SinceTime != nil,
		opts.SinceSeconds != nil && *opts.SinceSeconds < 1:
		return false
	case opts.Stream == nil:
		return true
	}
	switch *opts.Stream {
	case corev1.LogStreamAll:
		return true
	case corev1.LogStreamStdout, corev1.LogStreamStderr:
		return opts.TailLines == nil
	}
	return false
}
