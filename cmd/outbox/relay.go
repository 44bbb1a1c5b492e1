package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txoutbox/txoutbox/relay"
)

func init() {
	commands["relay"] = command{summary: "run the relay: publish the outbox to Kafka until SIGINT/SIGTERM", run: runRelay}
}

func runRelay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outbox relay", flag.ContinueOnError)
	var (
		common    commonFlags
		cfg       relay.Config
		brokers   = fs.String("brokers", "", "comma-separated Kafka brokers")
		devBroker = fs.Bool("dev-broker", false, "with no brokers, start an embedded in-memory Kafka-protocol broker: for development only, everything it holds is lost on exit")
		logLevel  = fs.String("log-level", "info", "debug, info, warn or error")
	)
	common.register(fs)
	fs.StringVar(&cfg.ID, "id", "", "relay id, unique among running relays; may stay the same across restarts (default host-pid-random)")
	fs.IntVar(&cfg.BatchSize, "batch", relay.BatchSizeDefault, "rows per claim")
	fs.IntVar(&cfg.Lanes, "lanes", relay.LanesDefault, "events published concurrently")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", relay.MaxAttemptsDefault, "failed publishes before an event is dead")
	fs.DurationVar(&cfg.PollInterval, "poll-interval", relay.PollIntervalDefault, "poll for due rows this often when not woken by NOTIFY")
	fs.BoolVar(&cfg.DisableListen, "no-listen", false, "do not LISTEN; poll only (for PgBouncer in transaction mode)")
	fs.DurationVar(&cfg.LeaseDuration, "lease", relay.LeaseDurationDefault, "how long a claim holds rows")
	fs.DurationVar(&cfg.HeartbeatInterval, "heartbeat", relay.HeartbeatIntervalDefault, "heartbeat and rebalance interval")
	fs.DurationVar(&cfg.StaleAfter, "stale-after", relay.StaleAfterDefault, "declare a relay dead after its heartbeat is this old")
	fs.DurationVar(&cfg.BackoffMin, "backoff-min", relay.BackoffMinDefault, "first retry delay of a failed event")
	fs.DurationVar(&cfg.BackoffMax, "backoff-max", relay.BackoffMaxDefault, "longest retry delay")
	fs.DurationVar(&cfg.Retention, "retention", relay.RetentionDefault, "keep published rows this long (negative: never prune)")
	fs.DurationVar(&cfg.StatementTimeout, "statement-timeout", relay.StatementTimeoutDefault, "bound every statement, lock wait and idle transaction of the relay")
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	table, err := common.outboxTable()
	if err != nil {
		return err
	}
	cfg.Table = table
	logOut := processFrom(ctx).stderr
	cfg.Logger = slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level}))
	if common.json {
		cfg.Logger = slog.New(slog.NewJSONHandler(logOut, &slog.HandlerOptions{Level: level}))
	}
	// Validate everything before touching the database or a broker
	// (sql.Open connects lazily).
	lazy, err := sql.Open("pgx", "postgres://validate-only")
	if err != nil {
		return err
	}
	_, err = relay.New(lazy, nopPublisher{}, cfg)
	lazy.Close()
	if err != nil {
		return usagef("%v", err)
	}

	addrs := splitList(*brokers)
	switch {
	case len(addrs) > 0 && *devBroker:
		return usagef("--dev-broker starts an embedded broker instead of --brokers/KAFKA_BROKERS (%s): give one or the other", strings.Join(addrs, ","))
	case len(addrs) == 0 && !*devBroker:
		// Publishing real rows into a broker that vanishes on exit would
		// mark them published and lose them: never the default.
		return usagef("no Kafka brokers: set --brokers or %s (or KAFKA_BROKERS) to publish to a cluster, or pass --dev-broker to publish into an embedded in-memory broker that loses everything on exit (development only)", envName("brokers"))
	case *devBroker:
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			return fmt.Errorf("start embedded broker: %w", err)
		}
		defer cluster.Close()
		addrs = cluster.ListenAddrs()
		cfg.Logger.Warn("DEVELOPMENT BROKER: --dev-broker started an embedded in-memory Kafka-protocol broker (kfake); "+
			"events published to it are marked published in the outbox and LOST when this process exits", "brokers", strings.Join(addrs, ","))
	}

	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxIdleConns(8) // the relay's loops use up to six connections at once
	pub, err := relay.NewKafkaPublisher(addrs, relay.KafkaConfig{})
	if err != nil {
		return err
	}
	defer pub.Close()
	r, err := relay.New(db, pub, cfg)
	if err != nil {
		return usagef("%v", err)
	}
	fmt.Fprintf(stdout, "relay %s publishing %s to %s\n", r.ID(), table, strings.Join(addrs, ","))
	start := time.Now()
	if err := r.Run(ctx); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "relay %s stopped after %s\n", r.ID(), time.Since(start).Round(time.Second))
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}
