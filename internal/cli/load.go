package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/closingtime-dev/closingtime/internal/load"
	"github.com/closingtime-dev/closingtime/retry"
)

type loadFlags struct {
	rate            float64
	duration        time.Duration
	clients         []string
	connections     int
	connectTimeout  time.Duration
	responseTimeout time.Duration
	retry           bool
	retryAttempts   int
	retryBaseDelay  time.Duration
	stopFile        string
	events          string
	output          string
}

// stopFilePoll is how often --stop-file is looked for.
const stopFilePoll = 100 * time.Millisecond

func newLoadCommand(streams Streams) *cobra.Command {
	var flags loadFlags
	cmd := &cobra.Command{
		Use:   "load URL",
		Short: "Send requests at a constant rate and count the failures by kind and by second",
		Long: `Send GET requests to URL at a constant rate (open loop: each request starts
on its schedule whatever the earlier ones are doing) and sort every request
into ok, refused, reset, closed, connect-timeout, response-timeout, http5xx
or error, from the socket error itself.

Each --client is one stream of requests with its own rate: new-conn dials a
connection for each request; keep-alive sends over a pool of --connections
persistent connections. Neither resends a failed request unless --retry is
given, and then only what is safe to resend (see the retry package).

The run ends after --duration, on SIGINT or SIGTERM, or when --stop-file
exists; requests in flight then finish or time out and are counted.

-o jsonl writes one JSON line per request to standard output as it
completes, then the report as the last line, {"report":{...}}, with its
latency histograms, so that the reports of several runs merge exactly:
the load pods of a real cluster hand their results back that way, through
their logs (docs/load.md).`,
		Example: `  closingtime load http://127.0.0.1:8080/work --rate 50 --duration 30s
  closingtime load http://127.0.0.1:8080/work --client new-conn=50 --client keep-alive=200 -o json
  closingtime load http://app/work --duration 10m --stop-file /tmp/stop --events events.jsonl
  closingtime load http://web.shop:80/ --client keep-alive=500 --retry --retry-attempts 3 -o jsonl`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("load: want exactly one URL, got %d arguments (see closingtime load --help)", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if f := cmd.Flags(); !flags.retry && (f.Changed("retry-attempts") || f.Changed("retry-base-delay")) {
				return usagef("load: --retry-attempts and --retry-base-delay need --retry")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runLoad(ctx, streams, args[0], flags)
		},
	}
	f := cmd.Flags()
	f.Float64Var(&flags.rate, "rate", load.DefaultRate, "requests per second of each --client that gives no rate of its own")
	f.DurationVar(&flags.duration, "duration", load.DefaultDuration, "how long to send requests")
	f.StringArrayVar(&flags.clients, "client", nil, "a client: new-conn or keep-alive, with its own rate as KIND=RATE; repeatable (default new-conn)")
	f.IntVar(&flags.connections, "connections", load.DefaultConnections, "persistent connections of a keep-alive client")
	f.DurationVar(&flags.connectTimeout, "connect-timeout", load.DefaultConnectTimeout, "how long a connect may take")
	f.DurationVar(&flags.responseTimeout, "response-timeout", load.DefaultResponseTimeout, "how long a response may take once connected")
	f.BoolVar(&flags.retry, "retry", false, "resend the requests that are safe to resend, on a new connection, and report them as absorbed")
	f.IntVar(&flags.retryAttempts, "retry-attempts", retry.DefaultAttempts, "with --retry, the most attempts per request, the first included")
	f.DurationVar(&flags.retryBaseDelay, "retry-base-delay", retry.DefaultBaseDelay, "with --retry, the backoff ceiling before the first retry")
	f.StringVar(&flags.stopFile, "stop-file", "", "stop sending when this file exists")
	f.StringVar(&flags.events, "events", "", "write one JSON line per request to this file")
	f.StringVarP(&flags.output, "output", "o", "text", "output format: text, json, or jsonl (a line per request, then the report)")
	return cmd
}

func runLoad(ctx context.Context, streams Streams, target string, flags loadFlags) error {
	if flags.output != "text" && flags.output != "json" && flags.output != "jsonl" {
		return usagef("load: invalid --output %q: accepted values are text, json, jsonl", flags.output)
	}
	cfg := load.Config{
		URL:             target,
		Duration:        flags.duration,
		ConnectTimeout:  flags.connectTimeout,
		ResponseTimeout: flags.responseTimeout,
	}
	if flags.rate <= 0 {
		return usagef("load: invalid --rate %v: want a positive number of requests per second", flags.rate)
	}
	if flags.duration <= 0 || flags.connectTimeout <= 0 || flags.responseTimeout <= 0 || flags.connections <= 0 {
		return usagef("load: --duration, --connect-timeout, --response-timeout and --connections must be positive")
	}
	clients, err := parseClients(flags.clients, flags.rate, flags.connections)
	if err != nil {
		return &usageError{fmt.Errorf("load: %w", err)}
	}
	cfg.Clients = clients
	if flags.retryAttempts <= 0 || flags.retryBaseDelay <= 0 {
		return usagef("load: --retry-attempts and --retry-base-delay must be positive")
	}
	if flags.retry {
		cfg.Retry = &retry.Policy{Attempts: flags.retryAttempts, BaseDelay: flags.retryBaseDelay}
	}
	switch {
	case flags.output == "jsonl" && flags.events != "":
		return usagef("load: give --events or -o jsonl, not both: jsonl writes the events to standard output")
	case flags.output == "jsonl":
		cfg.Events = streams.Out
	case flags.events != "":
		f, err := os.Create(flags.events)
		if err != nil {
			return fmt.Errorf("load: %w", err)
		}
		defer f.Close()
		cfg.Events = f
	}
	gen, err := load.New(cfg)
	if err != nil {
		if flags.events != "" {
			os.Remove(flags.events)
		}
		return &usageError{fmt.Errorf("load: %w", err)}
	}
	if flags.stopFile != "" {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		go watchStopFile(ctx, flags.stopFile, cancel)
	}
	report, err := gen.Run(ctx)
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	switch flags.output {
	case "jsonl":
		return load.WriteReportLine(streams.Out, report)
	case "json":
		enc := json.NewEncoder(streams.Out)
		enc.SetIndent("", "  ")
		return enc.Encode(report)
	}
	return load.WriteText(streams.Out, report)
}

// parseClients turns --client values (KIND or KIND=RATE) into clients; a
// client without a rate gets rate.
func parseClients(values []string, rate float64, connections int) ([]load.Client, error) {
	if len(values) == 0 {
		values = []string{load.NewConn.String()}
	}
	var clients []load.Client
	for _, v := range values {
		name, rateText, hasRate := strings.Cut(v, "=")
		kind, err := load.ParseKind(name)
		if err != nil {
			return nil, fmt.Errorf("--client %q: %w", v, err)
		}
		c := load.Client{Kind: kind, Rate: rate, Connections: connections}
		if hasRate {
			if c.Rate, err = strconv.ParseFloat(rateText, 64); err != nil || c.Rate <= 0 {
				return nil, fmt.Errorf("--client %q: invalid rate %q: want a positive number of requests per second", v, rateText)
			}
		}
		if kind == load.NewConn {
			c.Connections = 0
		}
		clients = append(clients, c)
	}
	return clients, nil
}

// watchStopFile calls stop once path exists, as the seeds' load script
// stops when /tmp/stop appears. It returns when ctx is done.
func watchStopFile(ctx context.Context, path string, stop context.CancelFunc) {
	ticker := time.NewTicker(stopFilePoll)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				stop()
				return
			}
		}
	}
}
