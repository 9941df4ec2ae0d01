package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/closingtime-dev/closingtime/internal/cluster"
	"github.com/closingtime-dev/closingtime/internal/golden"
	"github.com/closingtime-dev/closingtime/internal/manifest"
)

// goldenImage is the image of the golden manifests' containers, which the
// cluster maps to `closingtime serve`.
const goldenImage = "closingtime:golden"

// TestGolden runs each manifest of testdata/golden on a cluster — the
// Deployment web is applied, then the action in the file's "# action:"
// comment, restart or scale N, is taken — and compares what happened with
// the .events file beside it: the order in which the ReplicaSets were
// scaled, and each pod's events in order, with their deterministic fields.
// Times are left out, and so are the order of events of different pods
// and the failed probe runs, which no rule fixes; ReplicaSets and pods get names in order of
// appearance. -update rewrites the .events files (package golden).
func TestGolden(t *testing.T) {
	if testing.Short() {
		t.Skip("runs rollouts")
	}
	t.Parallel()
	files, err := filepath.Glob("testdata/golden/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden manifests: %v", err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".yaml")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			objs, errs := manifest.Parse(file, data)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			var objects []runtime.Object
			for _, o := range objs {
				objects = append(objects, o.Obj)
			}
			action := header(data, "action")
			c := newGoldenCluster(t)
			runGolden(t, c, objects, action)
			if header(data, "needs") == "pid-namespace" {
				for _, e := range c.EventLog().Events() {
					if e.Kind == cluster.ContainerStarted && e.Fields["pid_namespace"] == "none" {
						t.Skipf("no PID namespace on this system: %s", e.Fields["pid_namespace_reason"])
					}
				}
			}
			got := fmt.Sprintf("# Events of %s with action %q; rewritten by go test ./internal/cluster/local -run TestGolden -update.\n%s",
				filepath.Base(file), action, goldenEvents(c.EventLog().Events()))
			golden.Check(t, strings.TrimSuffix(file, ".yaml")+".events", []byte(got))
			if t.Failed() {
				t.Logf("events: %s", describe(c.EventLog().Events()))
			}
		})
	}
}

// header returns the value of the manifest's "# key: value" comment.
func header(data []byte, key string) string {
	m := regexp.MustCompile(`(?m)^# ` + key + `: (.*)$`).FindSubmatch(data)
	if m == nil {
		return ""
	}
	return strings.TrimSpace(string(m[1]))
}

// newGoldenCluster starts a cluster with goldenImage mapped to
// `closingtime serve`.
func newGoldenCluster(t *testing.T) *Cluster {
	t.Helper()
	return startCluster(t, Config{Kubelet: KubeletConfig{ImageCommands: map[string][]string{goldenImage: {binary, "serve"}}}})
}

// runGolden applies objects, waits for the rollout, takes action, waits
// for its rollout, and then until every pod that started has either
// terminated or is Ready and stays.
func runGolden(t *testing.T, c *Cluster, objects []runtime.Object, action string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	if err := c.Apply(ctx, objects); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	switch verb, arg, _ := strings.Cut(action, " "); verb {
	case "restart":
		if err := c.RolloutRestart(ctx, "default", "web"); err != nil {
			t.Fatal(err)
		}
	case "scale":
		n, err := strconv.Atoi(arg)
		if err != nil {
			t.Fatalf("action %q: %v", action, err)
		}
		if err := c.Scale(ctx, "default", "web", int32(n)); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("action %q: want restart or scale N", action)
	}
	if _, err := c.RolloutStatus(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	// One look per round; bounded by ctx.
	for {
		started, terminated := map[string]bool{}, map[string]bool{}
		for _, e := range c.EventLog().Events() {
			switch e.Kind {
			case cluster.PodStarted:
				started[e.Pod] = true
			case cluster.PodTerminated:
				terminated[e.Pod] = true
			}
		}
		settled := true
		for _, p := range c.Pods("default") {
			settled = settled && (p.DeletionTimestamp == nil && podReady(p) || terminated[p.Name])
			delete(started, p.Name)
		}
		for p := range started {
			settled = settled && terminated[p]
		}
		if settled {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pods still starting or terminating; events: %s", describe(c.EventLog().Events()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// goldenFields are the fields of each kind that the rules fix; the others
// (addresses, process IDs, delays, outputs) vary from run to run.
var goldenFields = map[cluster.EventKind][]string{
	cluster.ContainerStarted: {"restart"},
	cluster.ProbeResult:      {"probe", "result"},
	cluster.SignalSent:       {"signal", "grace"},
	cluster.ContainerExited:  {"code", "reason"},
	cluster.LivenessKill:     {"probe"},
	cluster.PodTerminating:   {"grace"},
	cluster.PodTerminated:    {"phase"},
	cluster.PodDeleted:       {"grace"},
	cluster.EvictionRefused:  {"status"},
}

// goldenEvents renders events as TestGolden compares them.
func goldenEvents(events []cluster.Event) string {
	rsNames := map[string]string{} // ReplicaSet name → rsN
	var b strings.Builder
	b.WriteString("\n# ReplicaSets, in the order they were scaled:\n")
	for _, e := range events {
		if e.Kind != cluster.ReplicaSetScaled {
			continue
		}
		name := strings.TrimPrefix(e.Object, "ReplicaSet/")
		if rsNames[name] == "" {
			rsNames[name] = "rs" + strconv.Itoa(len(rsNames)+1)
		}
		fmt.Fprintf(&b, "%s %s -> %s\n", rsNames[name], e.Fields["from"], e.Fields["to"])
	}
	// Each pod's events, by ReplicaSet. Failed probe runs are left out:
	// how many there are depends on timing (the first run, at the
	// container's start, may find its port still closed), which no rule
	// fixes; the probe_result that a run of them brings is kept.
	lines := map[string][]string{} // pod → its events
	for _, e := range events {
		if e.Pod == "" || e.Kind == cluster.ProbeFailed {
			continue
		}
		line := string(e.Kind)
		for _, f := range goldenFields[e.Kind] {
			if v, ok := e.Fields[f]; ok {
				line += " " + f + "=" + v
			}
		}
		if e.Kind == cluster.PreStopFinished && e.Fields["error"] != "" {
			line += " failed"
		}
		lines[e.Pod] = append(lines[e.Pod], line)
	}
	byRS := map[string][]string{} // rsN → its pods' event lists
	for pod, l := range lines {
		rs := rsNames[pod[:max(strings.LastIndexByte(pod, '-'), 0)]]
		byRS[rs] = append(byRS[rs], "  "+strings.Join(l, "\n  ")+"\n")
	}
	rss := make([]string, 0, len(byRS))
	for rs := range byRS {
		rss = append(rss, rs)
	}
	sort.Strings(rss)
	b.WriteString("\n# Pods, by ReplicaSet, each with its events in order:\n")
	for _, rs := range rss {
		// Which pod of a ReplicaSet had which fate is not fixed: sort them
		// by their events.
		pods := byRS[rs]
		slices.Sort(pods)
		for i, p := range pods {
			fmt.Fprintf(&b, "%s pod %d\n%s", rs, i+1, p)
		}
	}
	return b.String()
}
