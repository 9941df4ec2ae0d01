package cli

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/closingtime-dev/closingtime/internal/load"
)

// trafficFlags are the flags of the commands that send traffic, load and
// rollout: the clients, their rate and connections, the timeouts, and
// whether requests are retried.
type trafficFlags struct {
	rate            float64
	clients         []string
	connections     int
	limits          load.Limits
	connectTimeout  time.Duration
	responseTimeout time.Duration
	retry           bool
}

// bind binds the flags on f, with load's defaults.
func (t *trafficFlags) bind(f *pflag.FlagSet) {
	f.Float64Var(&t.rate, "rate", load.DefaultRate, "requests per second of each --client that gives no rate of its own")
	f.StringArrayVar(&t.clients, "client", nil, "a client: new-conn or keep-alive, with its own rate as KIND=RATE; repeatable (default new-conn)")
	f.IntVar(&t.connections, "connections", load.DefaultConnections, "persistent connections of a keep-alive client")
	f.DurationVar(&t.limits.MaxIdle, "max-idle", 0, "a keep-alive client redials instead of reusing a connection idle this long (0: no limit)")
	f.DurationVar(&t.limits.MaxLifetime, "max-lifetime", 0, "a keep-alive client retires a connection this old after its response (0: no limit)")
	f.DurationVar(&t.connectTimeout, "connect-timeout", load.DefaultConnectTimeout, "how long a connect may take")
	f.DurationVar(&t.responseTimeout, "response-timeout", load.DefaultResponseTimeout, "how long a response may take once connected")
	f.BoolVar(&t.retry, "retry", false, "resend the requests that are safe to resend, on a new connection, and report them as absorbed")
}

// parse checks the flags and returns the clients of --client, or a usage
// error named by command.
func (t trafficFlags) parse(command string) ([]load.Client, error) {
	if err := cmp.Or(
		positive(command, "--rate", t.rate),
		positive(command, "--connections", t.connections),
		positive(command, "--connect-timeout", t.connectTimeout),
		positive(command, "--response-timeout", t.responseTimeout),
		nonNegative(command, "--max-idle", t.limits.MaxIdle),
		nonNegative(command, "--max-lifetime", t.limits.MaxLifetime),
	); err != nil {
		return nil, err
	}
	clients, err := parseClients(t.clients, t.rate, t.connections, t.limits)
	if err != nil {
		return nil, usagef("%s: %w", command, err)
	}
	keepAlive := slices.ContainsFunc(clients, func(c load.Client) bool { return c.Kind == load.KeepAlive })
	if t.limits != (load.Limits{}) && !keepAlive {
		return nil, usagef("%s: --max-idle and --max-lifetime limit a keep-alive client's pool: give --client keep-alive too", command)
	}
	return clients, nil
}

// parseClients turns --client values (KIND or KIND=RATE) into clients; a
// client without a rate gets rate, and a keep-alive one connections and
// limits.
func parseClients(values []string, rate float64, connections int, limits load.Limits) ([]load.Client, error) {
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
		c := load.Client{Kind: kind, Rate: rate, Connections: connections, Limits: limits}
		if hasRate {
			if c.Rate, err = strconv.ParseFloat(rateText, 64); err != nil || c.Rate <= 0 {
				return nil, fmt.Errorf("--client %q: invalid rate %q: want a positive number of requests per second", v, rateText)
			}
		}
		if kind == load.NewConn {
			c.Connections, c.Limits = 0, load.Limits{}
		}
		clients = append(clients, c)
	}
	return clients, nil
}
