package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/closingtime-dev/closingtime/internal/target"
)

func TestServeConfig(t *testing.T) {
	t.Parallel()
	modes := "exit, graceful, hostage, ignore"
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    func(*target.Config) // changes from the defaults
		wantErr []string             // each in the error
	}{
		{name: "defaults", want: func(*target.Config) {}},
		{
			name: "every flag",
			args: []string{
				"--listen", "127.0.0.1:0", "--startup-delay", "5s", "--work", "100ms-300ms", "--shutdown", "graceful",
				"--pre-stop-delay", "5s", "--drain-timeout", "20s", "--idle-timeout", "65s", "--wrapper", "npm",
				"--wrapper-delay", "1s", "--dependency", "http://db:8080/health", "--dependency-timeout", "2s",
				"--crash-code", "3", "--crash-after", "10s", "--pod-name", "app-1", "--log-format", "text", "--access-log",
			},
			want: func(c *target.Config) {
				*c = target.Config{
					Listen: "127.0.0.1:0", StartupDelay: 5 * time.Second,
					Work:     target.Work{{Min: 100 * time.Millisecond, Max: 300 * time.Millisecond}},
					Shutdown: target.ModeGraceful, PreStopDelay: 5 * time.Second, DrainTimeout: 20 * time.Second,
					IdleTimeout: 65 * time.Second, Wrapper: target.WrapperNPM, WrapperDelay: time.Second,
					Dependency: "http://db:8080/health", DependencyTimeout: 2 * time.Second,
					CrashCode: 3, CrashAfter: 10 * time.Second, PodName: "app-1", LogFormat: target.LogText, AccessLog: true,
				}
			},
		},
		{
			name: "seed 001's environment",
			env:  map[string]string{"SHUTDOWN_MODE": "graceful", "STARTUP_DELAY": "5", "WORK_MS": "200"},
			want: func(c *target.Config) {
				c.Shutdown, c.StartupDelay = target.ModeGraceful, 5*time.Second
				c.Work = target.Work{{Min: 200 * time.Millisecond, Max: 200 * time.Millisecond}}
			},
		},
		{
			name: "bare numbers with decimals and ranges",
			env:  map[string]string{"STARTUP_DELAY": "5.0", "WORK_MS": "100-300", "CT_IDLE_TIMEOUT": "0.5"},
			want: func(c *target.Config) {
				c.StartupDelay, c.IdleTimeout = 5*time.Second, 500*time.Millisecond
				c.Work = target.Work{{Min: 100 * time.Millisecond, Max: 300 * time.Millisecond}}
			},
		},
		{
			name: "durations in the environment",
			env:  map[string]string{"STARTUP_DELAY": "1m", "WORK_MS": "1s-2s", "CT_DRAIN_TIMEOUT": "1m30s"},
			want: func(c *target.Config) {
				c.StartupDelay, c.DrainTimeout = time.Minute, 90*time.Second
				c.Work = target.Work{{Min: time.Second, Max: 2 * time.Second}}
			},
		},
		{
			name: "every CT_ variable",
			env: map[string]string{
				"CT_LISTEN": "127.0.0.1:9000", "CT_PRE_STOP_DELAY": "5", "CT_DRAIN_TIMEOUT": "20", "CT_WRAPPER": "sh",
				"CT_WRAPPER_DELAY": "0.2", "CT_DEPENDENCY": "https://db/health", "CT_DEPENDENCY_TIMEOUT": "2",
				"CT_CRASH_CODE": "3", "CT_CRASH_AFTER": "10", "CT_LOG_FORMAT": "text", "CT_ACCESS_LOG": "1",
				"CT_IDLE_TIMEOUT": "65s", "POD_NAME": "app-2",
			},
			want: func(c *target.Config) {
				c.Listen, c.PreStopDelay, c.DrainTimeout, c.Wrapper = "127.0.0.1:9000", 5*time.Second, 20*time.Second, target.WrapperSh
				c.WrapperDelay, c.Dependency, c.DependencyTimeout = 200*time.Millisecond, "https://db/health", 2*time.Second
				c.CrashCode, c.CrashAfter, c.LogFormat, c.AccessLog = 3, 10*time.Second, target.LogText, true
				c.IdleTimeout, c.PodName = 65*time.Second, "app-2"
			},
		},
		{
			name: "parts with their shares",
			args: []string{"--work", "2s, 1s-3s:10%,19s:5%"},
			want: func(c *target.Config) {
				c.Work = target.Work{{Min: 2 * time.Second, Max: 2 * time.Second},
					{Min: time.Second, Max: 3 * time.Second, Percent: 10}, {Min: 19 * time.Second, Max: 19 * time.Second, Percent: 5}}
			},
		},
		{
			name: "parts of bare numbers",
			env:  map[string]string{"WORK_MS": "2000,19000:5%"},
			want: func(c *target.Config) {
				c.Work = target.Work{{Min: 2 * time.Second, Max: 2 * time.Second}, {Min: 19 * time.Second, Max: 19 * time.Second, Percent: 5}}
			},
		},
		{
			name: "a flag wins over its variable",
			args: []string{"--work", "50ms", "--shutdown", "hostage"},
			env:  map[string]string{"WORK_MS": "300", "SHUTDOWN_MODE": "graceful"},
			want: func(c *target.Config) {
				c.Work, c.Shutdown = target.Work{{Min: 50 * time.Millisecond, Max: 50 * time.Millisecond}}, target.ModeHostage
			},
		},
		{
			name: "an empty variable is unset",
			env:  map[string]string{"SHUTDOWN_MODE": "", "WORK_MS": ""},
			want: func(*target.Config) {},
		},
		{
			name: "POD_IP sets the default address",
			env:  map[string]string{"POD_IP": "10.0.0.7"},
			want: func(c *target.Config) { c.Listen = "10.0.0.7:8080" },
		},
		{
			name: "POD_IP, an IPv6 address",
			env:  map[string]string{"POD_IP": "fd00::7"},
			want: func(c *target.Config) { c.Listen = "[fd00::7]:8080" },
		},
		{
			name: "--listen wins over POD_IP",
			args: []string{"--listen", ":9090"},
			env:  map[string]string{"POD_IP": "10.0.0.7"},
			want: func(c *target.Config) { c.Listen = ":9090" },
		},
		{
			name: "CT_LISTEN wins over POD_IP",
			env:  map[string]string{"POD_IP": "10.0.0.7", "CT_LISTEN": "0.0.0.0:9090"},
			want: func(c *target.Config) { c.Listen = "0.0.0.0:9090" },
		},

		{name: "unknown mode", args: []string{"--shutdown", "linger"}, wantErr: []string{`"--shutdown"`, modes}},
		{name: "unknown mode in the environment", env: map[string]string{"SHUTDOWN_MODE": "linger"},
			wantErr: []string{`SHUTDOWN_MODE="linger"`, "--shutdown", modes}},
		{name: "work range backwards", args: []string{"--work", "300ms-100ms"}, wantErr: []string{`"--work"`, "100ms-300ms"}},
		{name: "work not a duration", args: []string{"--work", "fast"}, wantErr: []string{`"--work"`, "200ms"}},
		{name: "work share not a percentage", args: []string{"--work", "2s,19s:5"}, wantErr: []string{`"--work"`, "2s,19s:5%"}},
		{name: "work shares over 100%", args: []string{"--work", "2s:60%,19s:50%"}, wantErr: []string{"shares sum to 110%, over 100%"}},
		{name: "work a bare number on the command line", args: []string{"--work", "200"}, wantErr: []string{`"--work"`}},
		{name: "WORK_MS not a number", env: map[string]string{"WORK_MS": "fast"},
			wantErr: []string{"WORK_MS", "--work", "bare numbers of milliseconds"}},
		{name: "negative delay", args: []string{"--startup-delay", "-1s"}, wantErr: []string{`"--startup-delay"`, "0 or more"}},
		{name: "STARTUP_DELAY not a number", env: map[string]string{"STARTUP_DELAY": "five"},
			wantErr: []string{"STARTUP_DELAY", "--startup-delay", "bare numbers of seconds"}},
		{name: "negative STARTUP_DELAY", env: map[string]string{"STARTUP_DELAY": "-5"},
			wantErr: []string{"STARTUP_DELAY", "0 or more"}},
		{name: "address without a port", args: []string{"--listen", "localhost"}, wantErr: []string{`"--listen"`, "host:port"}},
		{name: "port out of range", args: []string{"--listen", ":99999"}, wantErr: []string{`"--listen"`, "65535"}},
		{name: "CT_LISTEN without a port", env: map[string]string{"CT_LISTEN": "10.0.0.7"}, wantErr: []string{"CT_LISTEN", "--listen"}},
		{name: "crash code out of range", args: []string{"--crash-code", "256"}, wantErr: []string{`"--crash-code"`, "0 to 255"}},
		{name: "negative CT_CRASH_CODE", env: map[string]string{"CT_CRASH_CODE": "-1"}, wantErr: []string{"CT_CRASH_CODE", "0 to 255"}},
		{name: "dependency not http", args: []string{"--dependency", "ftp://db"}, wantErr: []string{`"--dependency"`, "http or https"}},
		{name: "unknown log format", args: []string{"--log-format", "xml"}, wantErr: []string{`"--log-format"`, "json, text"}},
		{name: "unknown wrapper", args: []string{"--wrapper", "bash"}, wantErr: []string{`"--wrapper"`, "none, npm, sh"}},
		{name: "CT_ACCESS_LOG not a boolean", env: map[string]string{"CT_ACCESS_LOG": "maybe"},
			wantErr: []string{"CT_ACCESS_LOG", "--access-log", "true, false"}},
		{name: "bare number for a duration flag", args: []string{"--wrapper-delay", "5"}, wantErr: []string{`"--wrapper-delay"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
			fs.SetOutput(new(bytes.Buffer))
			flags := newServeFlags(fs)
			err := fs.Parse(tt.args)
			var got target.Config
			if err == nil {
				got, err = flags.config(fs, func(k string) (string, bool) { v, ok := tt.env[k]; return v, ok })
			}
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("no error, want one with %q", tt.wantErr)
				}
				for _, want := range tt.wantErr {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q lacks %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := target.Config{
				Work: target.Work{{Min: target.DefaultWork}}, Shutdown: target.DefaultShutdown,
				IdleTimeout: target.DefaultIdleTimeout, Wrapper: target.WrapperNone, WrapperDelay: target.DefaultWrapperDelay,
				DependencyTimeout: target.DefaultDependencyTimeout, LogFormat: target.LogJSON,
			}
			tt.want(&want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}

// TestServeUsage checks that bad values end `closingtime serve` with exit
// status 2 and a message that names what was wrong, before it starts.
func TestServeUsage(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      map[string]string
		wantText []string
	}{
		{"flag", []string{"serve", "--shutdown", "linger"}, nil, []string{"--shutdown", "exit, graceful, hostage, ignore"}},
		{"environment", []string{"serve"}, map[string]string{"SHUTDOWN_MODE": "linger"},
			[]string{"SHUTDOWN_MODE", "--shutdown", "exit, graceful, hostage, ignore"}},
		{"unknown flag", []string{"serve", "--linger"}, nil, []string{"--linger"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var out, errOut bytes.Buffer
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a valid command line would start serving
			code := Run(ctx, tt.args, Streams{In: new(bytes.Buffer), Out: &out, Err: &errOut})
			if code != ExitUsage {
				t.Errorf("exit status %d, want %d; standard error %q", code, ExitUsage, errOut.String())
			}
			for _, want := range tt.wantText {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("standard error %q lacks %q", errOut.String(), want)
				}
			}
			if out.Len() > 0 {
				t.Errorf("standard output %q, want nothing", out.String())
			}
		})
	}
}

func TestBareDurations(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		unit time.Duration
		want string
	}{
		{"5", time.Second, "5s"},
		{"5.0", time.Second, "5s"},
		{"0.25", time.Second, "250ms"},
		{"200", time.Millisecond, "200ms"},
		{"100-300", time.Millisecond, "100ms-300ms"},
		{"100ms-300", time.Millisecond, "100ms-300ms"},
		{"1m30s", time.Second, "1m30s"},
		{"-5", time.Second, "-5s"},
		{"5", 0, "5"},
		{"1e3", time.Second, "1e3"},
		{"", time.Second, ""},
	}
	for _, tt := range tests {
		if got := bareDurations(tt.in, tt.unit); got != tt.want {
			t.Errorf("bareDurations(%q, %v) = %q, want %q", tt.in, tt.unit, got, tt.want)
		}
	}
}

// TestServeExitStatus checks that serve's exit code becomes the process's.
func TestServeExitStatus(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	code := Run(context.Background(), []string{"serve", "--crash-code", "7", "--listen", "127.0.0.1:0"},
		Streams{In: new(bytes.Buffer), Out: &out, Err: &errOut})
	if code != 7 || errOut.Len() > 0 {
		t.Errorf("exit status %d, standard error %q; want 7 and nothing printed", code, errOut.String())
	}
	if !strings.Contains(out.String(), `"event":"crash"`) {
		t.Errorf("standard output %q lacks the crash event", out.String())
	}
}
