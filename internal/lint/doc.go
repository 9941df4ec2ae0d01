// Package lint finds, in Kubernetes manifests, the settings that make
// rollouts, scale-ins and node drains drop requests: missing readiness
// probes and preStop delays, termination budgets that do not fit the grace
// period, a shell or package manager as the container's first process,
// rollouts that take serving pods away, and disruption budgets that block
// every drain.
//
// [Read] takes Kubernetes manifests (through manifest.Reader, which also
// builds kustomizations and renders Helm charts), Dockerfiles and
// supervisord configurations.
//
// Each check is a [Rule] with an ID, a [Severity], the phenomenon it
// prevents and its fix. [Linter.Lint] relates the objects it is given as the
// cluster relates them (a Service to the workloads whose pod template its
// selector matches, a PodDisruptionBudget likewise, a HorizontalPodAutoscaler
// to its scaleTargetRef, all within one namespace, where an object without a
// namespace is in "default"), taking each directory of manifests, and each
// kustomization's or chart's output, for a cluster of its own, and returns
// [Finding] values that point at the file and line of the field to change:
// for a kustomization's or chart's object, in the resource file or the
// template it came from (see manifest.Object's Build).
//
// [Measure] summarises the results of `closingtime rollout` (or `lab`) by
// Deployment; given in [Config.Measured], they let the rule
// prestop-shorter-than-measured judge each measured Deployment's preStop
// delay by how long its old pods still received new connections after
// their termination started, and [Linter.Unmatched] names the measurements
// that concern none of the inputs.
//
// A finding on an object is suppressed by listing its rule ID in the
// object's closingtime.dev/ignore annotation (see [IgnoreAnnotation]), in a
// "# closingtime ignore=" comment above a Dockerfile instruction or in a
// supervisord program's section, or by a [Suppression] of the [Config].
// Kubernetes' defaults come from package cluster, so that the linter judges
// a manifest by the values the cluster would run it with.
package lint
