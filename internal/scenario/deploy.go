package scenario

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/closingtime-dev/closingtime/internal/cluster"
)

// DeployError is the error of a run whose workload did not deploy: the
// cluster refused it, its first rollout did not complete or its Service
// did not answer within the run's limit, or, before the first action, a
// container of the Deployment's pods exited (while its pod was not
// terminating) or failed to start, or fewer pods than its replicas were
// ready. Such a run
// would measure a workload that does not run, not a rollout: the runner
// stops it and returns no result.
type DeployError struct {
	// Scenario is the scenario's name.
	Scenario string
	// Step is what did not happen: "apply", "deploy: its pods never all
	// became ready", "wait for the service to answer", or "deploy" for a
	// workload found not to run before the action.
	Step string
	// Err says why.
	Err error
	// Cause is the cluster's explanation: the latest notice of a
	// container that failed to start or exited, or else of a failing
	// probe, with a hint at the likely cause (see [Progress.Notice]);
	// empty if there was none.
	Cause string
}

func (e *DeployError) Error() string {
	msg := fmt.Sprintf("scenario %s: %s: %v", e.Scenario, e.Step, e.Err)
	if e.Cause != "" {
		msg += " (from the cluster: " + e.Cause + ")"
	}
	return msg
}

func (e *DeployError) Unwrap() error { return e.Err }

// errExited is the cause of a deploy stopped by a container's exit or
// failed start.
var errExited = errors.New("a container exited or failed to start")

// setupOf returns, after events, the exits and failed starts of
// containers of Deployment d's pods while their pod was not terminating
// (but the exits of init containers, which are run again),
// a line each ("pod web-1: container web exited with code 1", "pod web-1:
// container web failed to start: …"), how many of those were failed
// starts, how many of its pods are ready, and how many of its pods events
// saw created.
func setupOf(events []cluster.Event, d string) (exits []string, failed, ready, known int) {
	tr := newReadiness(d)
	for _, e := range events {
		tr.add(e)
		if !tr.ours[e.Pod] || tr.ended[e.Pod] || cluster.InitDone(e.Kind, e.Fields) {
			continue
		}
		switch e.Kind {
		case cluster.ContainerExited:
			// An init container that fails runs again after its back-off,
			// as part of its pod's start (C1): a wait for a dependency
			// often fails a few times. Whether it ever passes, the pods'
			// readiness tells.
			if e.Fields["init"] != "" && !cluster.OfSidecar(e.Fields) {
				continue
			}
			exits = append(exits, fmt.Sprintf("pod %s: %s %s exited with code %s", e.Pod, containerKind(e.Fields), e.Container, e.Fields["code"]))
		case cluster.ContainerStartFailed:
			exits = append(exits, fmt.Sprintf("pod %s: %s %s failed to start: %s", e.Pod, containerKind(e.Fields), e.Container, e.Fields["error"]))
			failed++
		}
	}
	return exits, failed, tr.ready(), len(tr.ours)
}

// deployed returns nil if Deployment d of scenario s is one to measure, as
// rec, the runner's recording of the cluster's events, shows it: no
// container of its pods has exited or failed to start while its pod was
// not terminating, and its replicas are ready. It waits up to
// catchUpTimeout for rec, which follows the cluster's events a little
// behind, to show them ready, or an exit. Readiness is judged only of pods
// that rec saw created: the pods of a Deployment that ran before the run
// (rollout --kube deploy/NAME) come without events, and its completed
// first rollout vouches for them, also when some of its pods were replaced
// since. Otherwise it returns a *DeployError whose cause is the explanation of
// the pod notices of rec's events, which read c's logs; or ctx.Err() if ctx ends.
func deployed(ctx context.Context, s *Scenario, c cluster.Backend, rec *cluster.EventLog, d *appsv1.Deployment) error {
	want := int(replicas(d))
	var exits, others []string
	var failed, ready, known int
	wctx, cancel := context.WithTimeout(ctx, catchUpTimeout)
	defer cancel()
	// A wait that times out leaves fewer ready than want: the answer.
	_ = waitFor(wctx, rec, func(events []cluster.Event) bool {
		exits, failed, ready, known = setupOf(events, d.Name)
		others = otherExits(events, s, d)
		return len(exits) > 0 || len(others) > 0 || ready >= min(want, known)
	})
	if err := ctx.Err(); err != nil {
		return err
	}
	var why string
	switch {
	case failed == len(exits) && failed > 1:
		why = fmt.Sprintf("containers failed to start %d times", failed)
	case failed == len(exits) && failed == 1:
		why = "a container failed to start"
	case len(exits) > 1:
		why = fmt.Sprintf("containers exited or failed to start %d times", len(exits))
	case len(exits) == 1:
		why = "a container exited"
	case len(others) > 0:
		// Another Deployment of the workload, such as an ingress in
		// front of the measured one.
		why, exits = "a container of another Deployment of the workload exited or failed to start", others
	case ready < min(want, known):
		// Pods that rec did not see created are the completed rollout's.
		why = fmt.Sprintf("%d of %d pods ready", ready+want-min(want, known), want)
	default:
		return nil
	}
	// The cause names the latest exit, with its log.
	cause := explanationOf(ctx, c, rec.Events())
	if cause == "" && len(exits) > 0 {
		cause = exits[len(exits)-1]
	}
	return &DeployError{Scenario: s.Name, Step: "deploy",
		Err:   fmt.Errorf("%s before the %s, which was not done: a workload that does not run is not measured", why, cmp.Or(s.Action.Kind, "action")),
		Cause: cause}
}

// otherExits returns, after events, the exits and failed starts of the
// containers of scenario s's Deployments other than d, as setupOf says
// them, each after its Deployment's name.
func otherExits(events []cluster.Event, s *Scenario, d *appsv1.Deployment) []string {
	var out []string
	for _, od := range otherDeployments(s, d) {
		exits, _, _, _ := setupOf(events, od.Name)
		for _, x := range exits {
			out = append(out, "Deployment "+od.Name+": "+x)
		}
	}
	return out
}

// otherDeployments returns scenario s's Deployments other than d.
func otherDeployments(s *Scenario, d *appsv1.Deployment) []*appsv1.Deployment {
	var out []*appsv1.Deployment
	for _, o := range s.Objects {
		if od, ok := o.Obj.(*appsv1.Deployment); ok && od.Name != d.Name {
			out = append(out, od)
		}
	}
	return out
}

// explanationOf returns the explanation of the pod notices of events, which
// read the logs of c.
func explanationOf(ctx context.Context, c cluster.Backend, events []cluster.Event) string {
	d := newClusterNotices(ctx, c)
	for _, e := range events {
		d.notices(e)
	}
	return d.explanation()
}

// containerKind names what a container event's fields say the container
// is: "init container", "sidecar" or "container".
func containerKind(fields map[string]string) string {
	switch {
	case fields["init"] != "":
		return "init container"
	case cluster.OfSidecar(fields):
		return "sidecar"
	}
	return "container"
}
