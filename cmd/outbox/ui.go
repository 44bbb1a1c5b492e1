package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// uiListenDefault is where `outbox ui` listens: loopback, because the
// console authenticates nobody.
const uiListenDefault = "127.0.0.1:8080"

func init() {
	commands["ui"] = command{summary: "serve the web console: overview, relays, dead letters, events, replay", run: runUI}
}

func runUI(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outbox ui", flag.ContinueOnError)
	var (
		common      commonFlags
		opts        console.Options
		listen      = fs.String("listen", uiListenDefault, "address to serve the console on; it has no authentication, keep it on loopback or behind a proxy that authenticates")
		staleAfter  = fs.Duration("stale-after", outboxadmin.StaleAfterDefault, "count a relay alive if its heartbeat is younger (the relays' --stale-after)")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		sampleEvery = fs.Duration("sample-every", console.SampleEveryDefault, "sample backlog and lag for the overview's chart this often")
		slot        = fs.String("slot", "", walSlotHelp)
	)
	common.register(fs)
	fs.BoolVar(&opts.AllowWrites, "allow-writes", false, "allow retry, drop and replay from the console (default: read-only)")
	fs.StringVar(&opts.Title, "title", console.TitleDefault, "name shown in the pages' header, e.g. orders (prod)")
	// --allow-writes widens what the console can do: command line only, like
	// the selections of dead retry and replay.
	if err := parseFlags(ctx, fs, args, "allow-writes"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return usagef("--listen %q: %v", *listen, err)
	}
	if *sampleEvery <= 0 {
		return usagef("--sample-every must be positive (%s)", *sampleEvery)
	}
	opts.SampleEvery = *sampleEvery
	proc := processFrom(ctx)
	logger := slog.New(slog.NewTextHandler(proc.stderr, &slog.HandlerOptions{Level: level}))
	if common.json {
		logger = slog.New(slog.NewJSONHandler(proc.stderr, &slog.HandlerOptions{Level: level}))
	}
	opts.Logger = logger
	need := readerGrants
	if opts.AllowWrites {
		need = operatorGrants
	}
	adm, db, err := openAdmin(ctx, &common, outboxadmin.Config{StaleAfter: *staleAfter, Slot: *slot}, need)
	if err != nil {
		return err
	}
	defer db.Close()
	con, err := console.New(adm, opts)
	if err != nil {
		return usagef("%v", err)
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		logger.Warn("the console listens beyond loopback and authenticates nobody: put an authenticating proxy in front", "listen", *listen)
	}
	mode := "read-only"
	if opts.AllowWrites {
		mode = "writes allowed"
	}
	logger.Info("connected to the database", "database", redactDatabaseURL(common.databaseURL), "table", adminTable(&common))
	fmt.Fprintf(stdout, "serving the outbox console (%s) on http://%s/\n", mode, ln.Addr())

	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan error, 1)
	go func() { sampled <- con.Run(ctx) }()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err = <-served:
	case <-ctx.Done():
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = srv.Shutdown(sctx)
		scancel()
	}
	cancel()
	<-sampled
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// adminTable names the table for the log.
func adminTable(c *commonFlags) string {
	t, _ := c.outboxTable()
	return t.String()
}
