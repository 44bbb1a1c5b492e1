package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// walFlags are the flags of `outbox relay --mode wal` beside the ones both
// modes share (--lanes, --lane-batch, --max-in-flight, --max-attempts,
// --backoff-*, --retention, --statement-timeout, --cloudevents*); the
// polling relay's own (--batch aside, which sets the in-flight bound as in
// poll mode) are checked and ignored, and these are ignored in poll mode.
type walFlags struct {
	slot, publication string
	failover          bool
	maxInFlight       int
	senderTimeout     time.Duration
	standbyRetry      time.Duration
	cleanupInterval   time.Duration
}

func (w *walFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&w.slot, "slot", "", "wal mode: replication slot, unique on the server (default txoutbox_<database>_<schema>_<table>_<hash>, see docs/wal.md)")
	fs.StringVar(&w.publication, "publication", "", "wal mode: publication of the table's inserts (default: the slot's default name)")
	fs.BoolVar(&w.failover, "failover", false, "wal mode: create the slot with failover => true (PostgreSQL 17+), so a promoted standby keeps it")
	fs.IntVar(&w.maxInFlight, "max-in-flight", 0, "events held in flight at most (claimed, or read from the slot and not confirmed), the bound on duplicates after a crash (default 2 × --batch; at least --batch in poll mode)")
	fs.DurationVar(&w.senderTimeout, "sender-timeout", walrelay.SenderTimeoutDefault, "wal mode: the server frees the slot of a relay silent this long; standbys take over after it")
	fs.DurationVar(&w.standbyRetry, "standby-retry", walrelay.StandbyRetryDefault, "wal mode: how often a standby tries to take the slot")
	fs.DurationVar(&w.cleanupInterval, "cleanup-interval", walrelay.CleanupIntervalDefault, "wal mode: how often rows the slot confirmed are deleted (or marked published, with --retention)")
}

// config builds the WAL relay's configuration from the flags, checked.
func (w *walFlags) config(fs *flag.FlagSet, poll relay.Config, databaseURL string) (walrelay.Config, error) {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if databaseURL == "" {
		return walrelay.Config{}, usagef("no database: pass --database-url or set DATABASE_URL")
	}
	cfg := walrelay.Config{
		Table:            poll.Table,
		Publication:      w.publication,
		Slot:             w.slot,
		Failover:         w.failover,
		Lanes:            poll.Lanes,
		LaneBatch:        poll.LaneBatch,
		MaxInFlight:      w.maxInFlight,
		MaxAttempts:      poll.MaxAttempts,
		BackoffMin:       poll.BackoffMin,
		BackoffMax:       poll.BackoffMax,
		SenderTimeout:    w.senderTimeout,
		StandbyRetry:     w.standbyRetry,
		CleanupInterval:  w.cleanupInterval,
		StatementTimeout: poll.StatementTimeout,
		CloudEvents:      poll.CloudEvents,
		LargePayloads:    poll.LargePayloads,
		Logger:           poll.Logger,
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 2 * poll.BatchSize
	}
	// The WAL relay deletes what the slot confirmed unless told to keep it.
	if set["retention"] {
		cfg.Retention = poll.Retention
	}
	if cfg.PingInterval == 0 && cfg.SenderTimeout < 4*walrelay.PingIntervalDefault {
		cfg.PingInterval = cfg.SenderTimeout / 4
	}
	// walrelay.New checks the connection string too, once the publisher
	// is built: checked here, a bad one is a usage error before a broker
	// is dialled.
	if _, err := pgconn.ParseConfig(databaseURL); err != nil {
		return cfg, usagef("%v", fmt.Errorf("%w: connection string: %v", walrelay.ErrInvalidConfig, err))
	}
	if err := cfg.Validate(); err != nil {
		return cfg, flagUsage(err)
	}
	return cfg, nil
}

// runWALRelay is `outbox relay --mode wal`: it connects to the brokers and
// streams until ctx ends. A relay that finds the slot taken stands by.
func runWALRelay(ctx context.Context, stdout io.Writer, databaseURL string, cfg walrelay.Config, id string, addrs []string, kcfg kafkapub.Config, logger *slog.Logger, metricsSrv *metricsServer) error {
	if id == "" {
		host, _ := os.Hostname()
		id = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	plain := logger
	logger = logger.With("relay", id)
	cfg.Logger = logger
	pub, closeKafka, err := connectKafka(addrs, kcfg, logger)
	if err != nil {
		return err
	}
	defer closeKafka()
	if metricsSrv != nil {
		cfg.MeterProvider = metricsSrv.mp
	}
	r, err := walrelay.New(databaseURL, pub, cfg)
	if err != nil {
		return usagef("%s", pathFlags(err.Error()))
	}
	if metricsSrv != nil {
		metricsSrv.serveWAL(r, logger)
		plain.Info("serving /metrics, /healthz and /readyz", "addr", metricsSrv.ln.Addr().String())
	}
	start := time.Now()
	// Say on stdout which slot the relay uses, once Run has resolved its
	// name on connecting (a default name depends on the database), and
	// when this relay starts and stops streaming, for supervisors and the
	// crash suite: one of several relays streams.
	watchCtx, stopWatch := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		active, started := false, false
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case <-t.C:
			}
			if !started {
				slot := r.Slot()
				if slot == "" {
					continue
				}
				fmt.Fprintf(stdout, "relay %s publishing %s to %s from slot %s\n", id, cfg.Table, strings.Join(addrs, ","), slot)
				started = true
			}
			if now := r.Active(); now != active {
				active = now
				state := "standing by"
				if active {
					state = "streaming"
				}
				fmt.Fprintf(stdout, "relay %s %s\n", id, state)
			}
		}
	}()
	err = r.Run(ctx)
	stopWatch()
	<-watched
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "relay %s stopped after %s\n", id, time.Since(start).Round(time.Second))
	return nil
}
