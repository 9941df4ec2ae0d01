package scenario

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/internal/manifest"
	"github.com/closingtime-dev/closingtime/internal/podnet"
)

// Image is the container image that stands for `closingtime` in scenario
// manifests: a container of this image without a command runs the
// closingtime binary with the container's args, as a real image with
// closingtime as its entrypoint would.
const Image = "closingtime"

// Defaults of a scenario file's optional fields.
const (
	// DefaultRepetitions is how many times the action is repeated.
	DefaultRepetitions = 1
	// DefaultWarmUp is how long traffic runs before the action.
	DefaultWarmUp = 3 * time.Second
	// DefaultAfter is how long traffic goes on once the rollout is
	// complete and every terminating pod is gone: seed 001 keeps 3 s.
	DefaultAfter = 3 * time.Second
	// DefaultSettle is the pause between two repetitions.
	DefaultSettle = 5 * time.Second
	// DefaultRunLimit bounds one repetition, from the start of its traffic
	// to its end.
	DefaultRunLimit = 5 * time.Minute
	// DefaultPath is the HTTP path that traffic requests.
	DefaultPath = "/"
	// DefaultDependencyEnv is the container variable that gets the URL of
	// a scenario's dependency: the one `closingtime serve` checks on
	// /health-deep (docs/serve.md).
	DefaultDependencyEnv = "CT_DEPENDENCY"
)

// The actions a scenario can take.
const (
	ActionRolloutRestart = "rollout-restart"
	ActionDeletePod      = "delete-pod"
	ActionEvict          = "evict"
	ActionDrain          = "drain"
	ActionScale          = "scale"
	ActionSetEnv         = "set-env"
	ActionOutage         = "outage"
	ActionNone           = "none"
)

var actions = []string{ActionRolloutRestart, ActionDeletePod, ActionEvict, ActionDrain, ActionScale, ActionSetEnv, ActionOutage, ActionNone}

// The ways an outage takes the dependency down.
const (
	// OutageRefuse closes the dependency's listener and connections: new
	// connections are refused at once, as when the process is stopped.
	OutageRefuse = "refuse"
	// OutageBlackhole keeps the dependency's port open but never answers:
	// each request hangs until the client gives up, as when a firewall
	// drops the packets (seed 004's iptables DROP).
	OutageBlackhole = "blackhole"
)

var outageModes = []string{OutageRefuse, OutageBlackhole}

// Scenario is one experiment, as read from a scenario file and checked.
type Scenario struct {
	// Name names the scenario in reports.
	Name string `yaml:"name"`
	// Description is one line on what the scenario shows.
	Description string `yaml:"description"`
	// Seed is the seed whose experiment the scenario replays, if any.
	Seed string `yaml:"seed"`
	// Group names the experiment that the scenario is one side of, when
	// several scenarios make one comparison: `closingtime lab GROUP` runs
	// them all (Select).
	Group string `yaml:"group"`
	// Requires names what the scenario's pods need of the machine beside
	// closingtime, each one of Requirements' names: a program they run
	// (supervisord), or PodNetwork.
	Requires []string `yaml:"requires"`
	// Workload holds the manifests to apply.
	Workload Workload `yaml:"workload"`
	// Dependency, when set, is a service that the workload's pods depend
	// on, which the runner starts and an outage takes down.
	Dependency *Dependency `yaml:"dependency"`
	// Traffic is the load sent through the Service during each repetition.
	Traffic Traffic `yaml:"traffic"`
	// Action is what is done to the workload in each repetition.
	Action Action `yaml:"action"`
	// Repetitions is how many times the action runs; zero means
	// DefaultRepetitions.
	Repetitions int `yaml:"repetitions"`
	// WarmUp is the traffic before the action; zero means DefaultWarmUp.
	WarmUp time.Duration `yaml:"warmUp"`
	// After is the traffic after the workload is settled; zero means
	// DefaultAfter.
	After time.Duration `yaml:"after"`
	// Settle is the pause between repetitions; zero means DefaultSettle.
	Settle time.Duration `yaml:"settle"`
	// Cluster configures the cluster the scenario runs on.
	Cluster ClusterSettings `yaml:"cluster"`
	// Limits bound the run.
	Limits Limits `yaml:"limits"`
	// Quick holds the shorter settings of a quick run.
	Quick Quick `yaml:"quick"`

	// File is the scenario file's name, as given to Parse.
	File string `yaml:"-"`
	// Objects are the workload's objects, decoded with positions.
	Objects []manifest.Object `yaml:"-"`
}

// Workload names the manifests of a scenario: inline, by path, or both.
type Workload struct {
	// Manifest is manifest text (one or more YAML documents).
	Manifest string `yaml:"manifest"`
	// Files are manifest files or directories, relative to the scenario
	// file, read as kubectl's -f reads them.
	Files []string `yaml:"files"`
}

// Dependency is an HTTP service outside the cluster that the workload's
// pods call, such as a database behind a health check. The runner serves it
// on a loopback address of its own, outside every pod range; it answers
// every GET with 200 while it is up.
type Dependency struct {
	// Env is the container variable that the runner sets to the
	// dependency's URL in every container of every Deployment; empty means
	// DefaultDependencyEnv.
	Env string `yaml:"env"`
}

// Traffic is the load of a scenario: see package load.
type Traffic struct {
	// Service is the Service's name; empty means the only Service of the
	// workload.
	Service string `yaml:"service"`
	// Port is the Service port; zero means its first port.
	Port int32 `yaml:"port"`
	// Protocol is what the traffic speaks: ProtocolHTTP (empty means
	// it), ProtocolHTTP2, or ProtocolGRPC.
	Protocol Protocol `yaml:"protocol"`
	// Path is the request path; empty means DefaultPath. A gRPC
	// traffic's is the method it calls, "/SERVICE/METHOD"; empty means
	// the lab server's Work.
	Path string `yaml:"path"`
	// Clients are the streams of requests; none means one new-conn client
	// at load.DefaultRate.
	Clients []Client `yaml:"clients"`
	// ConnectTimeout and ResponseTimeout bound each request; zero means
	// load's defaults.
	ConnectTimeout  time.Duration `yaml:"connectTimeout"`
	ResponseTimeout time.Duration `yaml:"responseTimeout"`
	// Retry, when set, resends what is safe to resend (package retry).
	Retry *Retry `yaml:"retry"`
	// ResolveInterval, for a gRPC traffic, makes each channel look the
	// Service's name up itself, as a client of a headless Service does
	// through DNS, balance round robin over the addresses, and look again
	// when a connection is lost, at most once this long (grpc-go's DNS
	// resolver: load.DefaultResolveInterval); zero dials the name as it
	// is (a ClusterIP).
	ResolveInterval time.Duration `yaml:"resolveInterval"`
}

// A Protocol is what a scenario's traffic speaks.
type Protocol string

// The protocols.
const (
	// ProtocolHTTP GETs the traffic's path over HTTP/1.1.
	ProtocolHTTP Protocol = "http"
	// ProtocolHTTP2 GETs it over HTTP/2 without TLS (h2c, prior
	// knowledge), as `closingtime load h2c://…` does.
	ProtocolHTTP2 Protocol = "http2"
	// ProtocolGRPC makes unary gRPC calls of the traffic's path, with
	// the empty request, as `closingtime load grpc://…` does; without a
	// path, of the lab server's Work (`closingtime serve --grpc`).
	ProtocolGRPC Protocol = "grpc"
)

// Client is one stream of requests.
type Client struct {
	// Kind is the client's connection habit, new-conn or keep-alive in
	// the file.
	Kind load.Kind `yaml:"kind"`
	// Rate is in requests per second; zero means load.DefaultRate.
	Rate float64 `yaml:"rate"`
	// Connections is a keep-alive client's pool size; zero means
	// load.DefaultConnections.
	Connections int `yaml:"connections"`
	// MaxIdle and MaxLifetime are a keep-alive client's pool limits
	// (load.Limits); zero means none.
	MaxIdle     time.Duration `yaml:"maxIdle"`
	MaxLifetime time.Duration `yaml:"maxLifetime"`
}

// Retry is the client's retry policy; zero fields are package retry's
// defaults.
type Retry struct {
	// Attempts is the most attempts per request, the first included.
	Attempts int `yaml:"attempts"`
	// BaseDelay is the backoff before the first retry.
	BaseDelay time.Duration `yaml:"baseDelay"`
}

// Action is what a repetition does to the workload.
type Action struct {
	// Kind is one of rollout-restart, delete-pod, evict, drain, scale,
	// set-env, outage and none.
	Kind string `yaml:"kind"`
	// Deployment names the Deployment; empty means the only one.
	Deployment string `yaml:"deployment"`
	// Replicas is the target of scale.
	Replicas *int32 `yaml:"replicas"`
	// Node is the node that drain empties; empty means node-1.
	Node string `yaml:"node"`
	// Env are the variables that set-env sets in every container of the
	// Deployment's pod template, as `kubectl set env` does: a new version
	// is rolled out.
	Env map[string]string `yaml:"env"`
	// Mode is how an outage takes the dependency down: refuse or
	// blackhole.
	Mode string `yaml:"mode"`
	// Duration is how long an outage lasts.
	Duration time.Duration `yaml:"duration"`
	// Timeout bounds a drain, as `kubectl drain --timeout` does, and a
	// set-env rollout, as `helm upgrade --atomic --timeout` does: a drain
	// still blocked then is given up, a rollout still incomplete is rolled
	// back to the previous template (`kubectl rollout undo`). Zero means
	// no bound.
	Timeout time.Duration `yaml:"timeout"`
}

// ClusterSettings configure the cluster a scenario runs on; zero fields are
// the backend's defaults.
type ClusterSettings struct {
	// Nodes is the number of nodes.
	Nodes int `yaml:"nodes"`
	// PropagationDelay bounds the delay of endpoint changes reaching each
	// node's routing view.
	PropagationDelay DelayRange `yaml:"propagationDelay"`
}

// DelayRange is a range of durations; zero bounds are the backend's
// defaults.
type DelayRange struct {
	Min time.Duration `yaml:"min"`
	Max time.Duration `yaml:"max"`
}

// Limits bound a scenario's run.
type Limits struct {
	// Run bounds one repetition; zero means DefaultRunLimit. A repetition
	// that reaches it is an error.
	Run time.Duration `yaml:"run"`
}

// Quick holds the settings that replace the others in a quick run, where
// set. It shortens periods; it must not hide the scenario's phenomenon.
type Quick struct {
	// Description replaces the scenario's when the quick settings change
	// the numbers it gives.
	Description string `yaml:"description"`
	// Repetitions, WarmUp, After and Settle replace the scenario's own
	// when positive.
	Repetitions int           `yaml:"repetitions"`
	WarmUp      time.Duration `yaml:"warmUp"`
	After       time.Duration `yaml:"after"`
	Settle      time.Duration `yaml:"settle"`
	// Duration and Timeout replace the action's when positive.
	Duration time.Duration `yaml:"duration"`
	Timeout  time.Duration `yaml:"timeout"`
	// GracePeriodSeconds replaces the terminationGracePeriodSeconds of
	// every Deployment's pods.
	GracePeriodSeconds *int64 `yaml:"gracePeriodSeconds"`
	// Env sets environment variables of every container of every
	// Deployment, replacing a variable of the same name.
	Env map[string]string `yaml:"env"`
	// Rate, when positive, replaces the rate of every client: a rate
	// that a loaded machine sustains beside the other quick scenarios.
	Rate float64 `yaml:"rate"`
}

// Error is a problem in a scenario file.
type Error struct {
	// File names the scenario file, as given to Parse.
	File string
	// Line is the 1-based line of the field, or of its nearest ancestor
	// that the file writes; 0 when the problem concerns the whole file.
	Line int
	// Field is the field's path, as "traffic.clients[0].rate"; empty when
	// the problem concerns the whole file.
	Field string
	// Err is the reason.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Field != "" {
		b.WriteString(": " + e.Field)
	}
	b.WriteString(": " + e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// ReadFile reads and parses the scenario file at path; workload files are
// relative to its directory.
func ReadFile(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Err: manifest.StripPath(err)}
	}
	return Parse(path, data, func(files []string) ([]manifest.Object, []error) {
		paths := make([]string, len(files))
		for i, f := range files {
			paths[i] = f
			if !filepath.IsAbs(f) {
				paths[i] = filepath.Join(filepath.Dir(path), f)
			}
		}
		return manifest.Reader{}.Read(paths)
	})
}

// PodNetwork is the requirement of a scenario whose pods' containers talk
// on their pod's own loopback, as a sidecar proxy reaches its app on
// 127.0.0.1: each pod needs a network of its own, which the embedded
// cluster makes only where it may make network namespaces.
const PodNetwork = "pod-network"

// Requirements are what a scenario may require (Scenario.Requires): the
// programs, each with how to install it, and PodNetwork, with how to get
// it.
var Requirements = map[string]string{
	"supervisord": "apt-get install supervisor",
	PodNetwork:    "run as root, or inside unshare --user --map-root-user --net",
}

// Programs returns the programs that s requires, from this machine.
func (s *Scenario) Programs() []string {
	return slices.DeleteFunc(slices.Clone(s.Requires), func(name string) bool { return name == PodNetwork })
}

// Missing returns, for each thing that s requires and this machine lacks,
// a sentence that says so and how to get it.
func (s *Scenario) Missing() []string {
	var out []string
	if slices.Contains(s.Requires, PodNetwork) {
		if err := podnet.Check(); err != nil {
			out = append(out, fmt.Sprintf("its pods' containers talk on their pod's loopback, which needs a network of each pod's own (%v; %s)", err, Requirements[PodNetwork]))
		}
	}
	for _, name := range s.Programs() {
		if _, err := exec.LookPath(name); err != nil {
			msg := fmt.Sprintf("its pods run %s, which is not installed here", name)
			if how := Requirements[name]; how != "" {
				msg += " (" + how + ")"
			}
			out = append(out, msg)
		}
	}
	return out
}

// Parse decodes and checks the scenario file named file. readFiles reads
// the workload's files; nil means the file may name none. Every problem
// found is returned, joined, each an *Error or a *manifest.Error naming its
// file and line.
func Parse(file string, data []byte, readFiles func([]string) ([]manifest.Object, []error)) (*Scenario, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{File: file, Err: err}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, &Error{File: file, Line: 1, Err: errors.New("a scenario is a YAML mapping")}
	}
	root := doc.Content[0]
	p := &parser{file: file, root: root}
	p.knownFields(root, reflect.TypeFor[Scenario](), "")
	p.clientKinds()
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	s := &Scenario{File: file}
	if err := root.Decode(s); err != nil {
		return nil, &Error{File: file, Err: err}
	}
	p.check(s)
	// The workload's problems too, with the rest's: every one at once.
	p.readWorkload(s, readFiles)
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}

// parser collects the problems of one scenario file.
type parser struct {
	file string
	root *yaml.Node
	// where names the workload's manifests in errors; empty means
	// "the workload".
	where string
	errs  []error
}

func (p *parser) errorf(field, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: manifest.NodeLine(p.root, field), Field: field, Err: fmt.Errorf(format, args...)})
}

// knownFields reports every key of mapping n that the struct type t, read
// through its yaml tags, does not have, recursing into the fields it has,
// and every duration that does not parse as one.
func (p *parser) knownFields(n *yaml.Node, t reflect.Type, path string) {
	if t == reflect.TypeFor[time.Duration]() {
		if _, err := time.ParseDuration(n.Value); n.Kind == yaml.ScalarNode && err != nil {
			p.errs = append(p.errs, &Error{File: p.file, Line: n.Line, Field: path,
				Err: fmt.Errorf("%q is not a duration: give its unit, such as 5s or 500ms", n.Value)})
		}
		return
	}
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		if t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode {
			for i, el := range n.Content {
				p.knownFields(el, t.Elem(), fmt.Sprintf("%s[%d]", path, i))
			}
			return
		}
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || n.Kind != yaml.MappingNode || t == reflect.TypeFor[time.Duration]() {
		return
	}
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); name != "" && name != "-" {
			fields[name] = f.Type
		}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		field := key
		if path != "" {
			field = path + "." + key
		}
		ft, ok := fields[key]
		if !ok {
			p.errs = append(p.errs, &Error{File: p.file, Line: n.Content[i].Line, Field: field, Err: errors.New("unknown field")})
			continue
		}
		p.knownFields(n.Content[i+1], ft, field)
	}
}

// clientKinds reports each client of the traffic whose kind is missing or
// names no load.Kind. It reads them before the file is decoded, as
// knownFields does: a Kind decodes from its name, and the decoder's error
// for one that is not would name no field.
func (p *parser) clientKinds() {
	clients := mappingValue(mappingValue(p.root, "traffic"), "clients")
	if clients == nil || clients.Kind != yaml.SequenceNode {
		return
	}
	for i, c := range clients.Content {
		name := ""
		if kind := mappingValue(c, "kind"); kind != nil {
			name = kind.Value
		}
		if _, err := load.ParseKind(name); err != nil {
			p.errorf(fmt.Sprintf("traffic.clients[%d].kind", i), "%q is not new-conn or keep-alive", name)
		}
	}
}

// mappingValue returns the value of key in mapping n, nil if n is not a
// mapping or has no key.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// check validates the decoded fields.
func (p *parser) check(s *Scenario) {
	if s.Name == "" {
		p.errorf("name", "required")
	}
	if s.Workload.Manifest == "" && len(s.Workload.Files) == 0 {
		p.errorf("workload", "give manifest or files")
	}
	for i, name := range s.Requires {
		if _, ok := Requirements[name]; !ok {
			p.errorf(fmt.Sprintf("requires[%d]", i), "%q is not one of %s", name, strings.Join(slices.Sorted(maps.Keys(Requirements)), ", "))
		}
	}
	for i, c := range s.Traffic.Clients {
		if c.Rate < 0 {
			p.errorf(fmt.Sprintf("traffic.clients[%d].rate", i), "%g is negative", c.Rate)
		}
		if c.Connections < 0 {
			p.errorf(fmt.Sprintf("traffic.clients[%d].connections", i), "%d is negative", c.Connections)
		}
		for _, limit := range []struct {
			field string
			d     time.Duration
		}{{"maxIdle", c.MaxIdle}, {"maxLifetime", c.MaxLifetime}} {
			field := fmt.Sprintf("traffic.clients[%d].%s", i, limit.field)
			switch {
			case limit.d < 0:
				p.errorf(field, "%v is negative", limit.d)
			case limit.d != 0 && c.Kind != load.KeepAlive:
				p.errorf(field, "only a keep-alive client has a pool to limit")
			}
		}
	}
	if s.Traffic.Path != "" && !strings.HasPrefix(s.Traffic.Path, "/") {
		p.errorf("traffic.path", "want a path that starts with /, such as %q", "/"+s.Traffic.Path)
	}
	switch s.Traffic.Protocol {
	case "", ProtocolHTTP, ProtocolHTTP2:
	case ProtocolGRPC:
		if s.Traffic.Path != "" {
			if err := load.CheckGRPCMethod(s.Traffic.Path); err != nil {
				p.errorf("traffic.path", "%v: a gRPC traffic's path is the method it calls", err)
			}
		}
		if s.Traffic.Retry != nil {
			p.errorf("traffic.retry", "retries are the HTTP client's: grpc-go's own transparent retries are counted as absorbed")
		}
	default:
		p.errorf("traffic.protocol", "%q is not one of %s, %s (HTTP/2 without TLS, h2c), %s", s.Traffic.Protocol, ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC)
	}
	switch {
	case s.Traffic.ResolveInterval < 0:
		p.errorf("traffic.resolveInterval", "%v is negative", s.Traffic.ResolveInterval)
	case s.Traffic.ResolveInterval > 0 && s.Traffic.Protocol != ProtocolGRPC:
		p.errorf("traffic.resolveInterval", "a gRPC traffic's channels resolve the Service's name themselves; give traffic.protocol: grpc")
	}
	if r := s.Traffic.Retry; r != nil && r.Attempts < 0 {
		p.errorf("traffic.retry.attempts", "%d is negative", r.Attempts)
	}
	p.checkAction(s)
	for _, f := range []struct {
		field string
		n     int
	}{{"repetitions", s.Repetitions}, {"quick.repetitions", s.Quick.Repetitions}, {"cluster.nodes", s.Cluster.Nodes}} {
		if f.n < 0 {
			p.errorf(f.field, "%d is negative", f.n)
		}
	}
	for _, f := range []struct {
		field string
		d     time.Duration
	}{
		{"warmUp", s.WarmUp}, {"after", s.After}, {"settle", s.Settle}, {"limits.run", s.Limits.Run},
		{"quick.warmUp", s.Quick.WarmUp}, {"quick.after", s.Quick.After}, {"quick.settle", s.Quick.Settle},
		{"quick.duration", s.Quick.Duration}, {"quick.timeout", s.Quick.Timeout}, {"action.timeout", s.Action.Timeout},
		{"cluster.propagationDelay.min", s.Cluster.PropagationDelay.Min}, {"cluster.propagationDelay.max", s.Cluster.PropagationDelay.Max},
	} {
		if f.d < 0 {
			p.errorf(f.field, "%v is negative", f.d)
		}
	}
	if d := s.Cluster.PropagationDelay; d.Max > 0 && d.Min > d.Max {
		p.errorf("cluster.propagationDelay", "min %v is above max %v", d.Min, d.Max)
	}
	if g := s.Quick.GracePeriodSeconds; g != nil && *g < 0 {
		p.errorf("quick.gracePeriodSeconds", "%d is negative", *g)
	}
	if s.Quick.Rate < 0 {
		p.errorf("quick.rate", "%v is negative", s.Quick.Rate)
	}
}

// checkAction validates the action, and that it has the fields its kind
// needs and none that another kind takes.
func (p *parser) checkAction(s *Scenario) {
	a := s.Action
	switch a.Kind {
	case "":
		p.errorf("action.kind", "required: one of %s", strings.Join(actions, ", "))
		return
	case ActionScale:
		if a.Replicas == nil || *a.Replicas < 0 {
			p.errorf("action.replicas", "scale needs replicas, 0 or more")
		}
	case ActionSetEnv:
		if len(a.Env) == 0 {
			p.errorf("action.env", "set-env needs one variable or more")
		}
	case ActionOutage:
		if s.Dependency == nil {
			p.errorf("action.kind", "an outage needs the scenario's dependency section")
		}
		if !slices.Contains(outageModes, a.Mode) {
			p.errorf("action.mode", "%q is not one of %s", a.Mode, strings.Join(outageModes, ", "))
		}
		if a.Duration <= 0 {
			p.errorf("action.duration", "an outage needs a positive duration")
		}
	default:
		if !slices.Contains(actions, a.Kind) {
			p.errorf("action.kind", "%q is not one of %s", a.Kind, strings.Join(actions, ", "))
			return
		}
	}
	for _, f := range []struct {
		field string
		set   bool
		kinds []string
	}{
		{"action.replicas", a.Replicas != nil, []string{ActionScale}},
		{"action.node", a.Node != "", []string{ActionDrain}},
		{"action.env", len(a.Env) > 0, []string{ActionSetEnv}},
		{"action.mode", a.Mode != "", []string{ActionOutage}},
		{"action.duration", a.Duration != 0, []string{ActionOutage}},
		{"action.timeout", a.Timeout != 0, []string{ActionDrain, ActionSetEnv}},
	} {
		if f.set && !slices.Contains(f.kinds, a.Kind) {
			p.errorf(f.field, "only for %s, not %s", strings.Join(f.kinds, " or "), a.Kind)
		}
	}
}

// readWorkload decodes the workload's manifests, and checks that they hold
// the Service and Deployment that traffic and action name.
func (p *parser) readWorkload(s *Scenario, readFiles func([]string) ([]manifest.Object, []error)) {
	if m := s.Workload.Manifest; m != "" {
		// A block scalar's text starts on the line after its key.
		line := manifest.NodeLine(p.root, "workload.manifest")
		objs, errs := manifest.Parse(p.file, append(bytes.Repeat([]byte("\n"), line), m...))
		s.Objects = append(s.Objects, objs...)
		p.errs = append(p.errs, errs...)
	}
	if len(s.Workload.Files) > 0 {
		if readFiles == nil {
			p.errorf("workload.files", "files are not available here")
			return
		}
		objs, errs := readFiles(s.Workload.Files)
		s.Objects = append(s.Objects, objs...)
		p.errs = append(p.errs, errs...)
	}
	for _, o := range s.Objects {
		switch o.Obj.(type) {
		case *appsv1.Deployment, *corev1.Service:
		default:
			if o.Kind() != "PodDisruptionBudget" {
				p.errs = append(p.errs, &manifest.Error{File: o.File, Line: o.Line, Err: fmt.Errorf("%s: %s is not supported: the workload that rollout and lab run holds Deployments, Services and PodDisruptionBudgets only", o, o.Kind())})
			}
		}
	}
	if len(p.errs) > 0 {
		// An object that could not be decoded may be the one missing.
		return
	}
	where := cmp.Or(p.where, "the workload")
	if _, n, err := only[*corev1.Service](s.Objects, "Service", s.Traffic.Service, where); err != nil {
		if n == 0 && s.Traffic.Service == "" {
			err = noService(s.Objects)
		}
		// Naming the Service is the fix when there are several.
		p.errorf(namedOr(s.Traffic.Service != "" || n > 1, "traffic.service"), "%v", err)
	}
	if _, n, err := only[*appsv1.Deployment](s.Objects, "Deployment", s.Action.Deployment, where); err != nil {
		p.errorf(namedOr(s.Action.Deployment != "" || n > 1, "action.deployment"), "%v", err)
	}
}

// noService is the error for a workload without a Service: it says which
// Service to add, the traffic's way to the Deployment's pods.
func noService(objs []manifest.Object) error {
	var ds []*appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.Obj.(*appsv1.Deployment); ok {
			ds = append(ds, d)
		}
	}
	if len(ds) != 1 {
		return errors.New("no Service to send the traffic through: add one that selects the Deployment's pods")
	}
	var labels []string
	for _, k := range slices.Sorted(maps.Keys(ds[0].Spec.Template.Labels)) {
		labels = append(labels, k+": "+ds[0].Spec.Template.Labels[k])
	}
	return fmt.Errorf("no Service to send the traffic through: add one whose selector matches the pods of Deployment %s (%s)",
		ds[0].Name, strings.Join(labels, ", "))
}

// Service returns the Service that traffic goes to.
func (s *Scenario) Service() (*corev1.Service, error) {
	svc, _, err := only[*corev1.Service](s.Objects, "Service", s.Traffic.Service, "the workload")
	return svc, err
}

// Deployment returns the Deployment that the action concerns.
func (s *Scenario) Deployment() (*appsv1.Deployment, error) {
	d, _, err := only[*appsv1.Deployment](s.Objects, "Deployment", s.Action.Deployment, "the workload")
	return d, err
}

// only returns the object of type T named name, or the only one if name is
// empty, and the number of objects of type T in objs. The error for a
// name that is not there says where, the name of objs in errors, and
// lists the names there are.
func only[T interface {
	*appsv1.Deployment | *corev1.Service
	GetName() string
}](objs []manifest.Object, kind, name, where string) (T, int, error) {
	var all []string
	var found []T
	for _, o := range objs {
		if t, ok := o.Obj.(T); ok {
			all = append(all, t.GetName())
			if name == "" || t.GetName() == name {
				found = append(found, t)
			}
		}
	}
	switch {
	case len(found) == 1:
		return found[0], len(all), nil
	case name != "" && len(all) == 0:
		return nil, 0, fmt.Errorf("no %s %q in %s, which has no %s", kind, name, where, kind)
	case name != "":
		return nil, len(all), fmt.Errorf("no %s %q in %s; %ss: %s", kind, name, where, kind, strings.Join(all, ", "))
	case len(found) == 0:
		return nil, 0, fmt.Errorf("no %s", kind)
	default:
		return nil, len(all), fmt.Errorf("%d %ss (%s): name one", len(all), kind, strings.Join(all, ", "))
	}
}

// namedOr returns field when named, and "workload" otherwise: the field
// of an error about a missing object is the one that names it, if the file
// does or should.
func namedOr(named bool, field string) string {
	if named {
		return field
	}
	return "workload"
}

// FromManifests returns the scenario of `closingtime rollout`: the
// manifests at paths, read as kubectl's -f reads them, with traffic and
// action, checked as a scenario file is. Errors are those of Parse, with
// the paths for file name, and the paths instead of "the workload".
func FromManifests(name string, paths []string, traffic Traffic, action Action, repetitions int) (*Scenario, error) {
	s := &Scenario{
		Name:        name,
		File:        strings.Join(paths, ","),
		Workload:    Workload{Files: paths},
		Traffic:     traffic,
		Action:      action,
		Repetitions: repetitions,
	}
	p := &parser{file: s.File, where: strings.Join(paths, ", ")}
	p.check(s)
	if len(p.errs) == 0 {
		p.readWorkload(s, manifest.Reader{}.Read)
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return s, nil
}
