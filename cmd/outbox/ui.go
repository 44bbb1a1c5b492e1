package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/txoutbox/txoutbox/internal/hostname"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// uiListenDefault is where `outbox ui` listens: loopback, because the
// console authenticates nobody.
const uiListenDefault = "127.0.0.1:8080"

func runUI(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var (
		common      commonFlags
		opts        console.Options
		listen      = fs.String("listen", uiListenDefault, "address to serve the console on; beyond loopback it needs --allow-host, and --token-file or --behind-auth-proxy")
		allowHosts  = fs.String("allow-host", "", "comma-separated host names the console answers to (the browser's Host and Origin), besides the loopback names when --listen is on loopback; \"*\": any (needs --token-file or --behind-auth-proxy)")
		tokenFile   = fs.String("token-file", "", "require this file's token as the HTTP basic auth password (any user name, which the change log lines name as the operator)")
		proxied     = fs.Bool("behind-auth-proxy", false, "the console is behind a proxy that authenticates operators: allow --listen beyond loopback without --token-file")
		staleAfter  = fs.Duration("stale-after", outboxadmin.StaleAfterDefault, "count a relay alive if its heartbeat is younger (the relays' --stale-after)")
		logLevel    = fs.String("log-level", "info", "debug, info, warn or error")
		sampleEvery = fs.Duration("sample-every", console.SampleEveryDefault, "sample backlog and lag for the overview's chart this often")
		slot        = fs.String("slot", "", walSlotHelp)
	)
	var schemas schemasFlag
	common.register(fs)
	schemas.register(fs)
	schemas.registerDiscover(fs)
	fs.BoolVar(&opts.AllowWrites, "allow-writes", false, "allow retry, drop and replay from the console (default: read-only)")
	fs.StringVar(&opts.Title, "title", console.TitleDefault, "name shown in the pages' header, e.g. orders (prod)")
	// --allow-writes widens what the console can do: command line only, like
	// the selections of dead retry and replay.
	if err := proc.parseFlagsOnly(fs, args, "allow-writes", "behind-auth-proxy"); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usagef("--log-level: %v", err)
	}
	host, port, err := net.SplitHostPort(*listen)
	if err != nil {
		return usagef("--listen %q: %v", *listen, err)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return usagef("--listen %q: %v", *listen, err)
	}
	for _, h := range strings.Split(*allowHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			opts.Hosts = append(opts.Hosts, h)
		}
	}
	if *tokenFile != "" {
		b, err := os.ReadFile(*tokenFile)
		if err != nil {
			return usagef("--token-file: %v", err)
		}
		if opts.Authenticate, err = console.TokenAuth(strings.TrimSpace(string(b))); err != nil {
			return usagef("--token-file %s: %v", *tokenFile, err)
		}
	}
	if hostname.IsLoopback(host) && len(opts.Hosts) > 0 {
		// Names added for a tunnel or a proxy: loopback is still served.
		opts.Hosts = append(opts.Hosts, "localhost", "127.0.0.1", "::1")
	}
	if !hostname.IsLoopback(host) {
		// Anyone who reaches the port could read payloads and, with
		// --allow-writes, drop events; a browser tricked by DNS rebinding
		// too, unless the Host is checked against the names served.
		switch {
		case len(opts.Hosts) == 0:
			return usagef("--listen %s is beyond loopback: name the hosts the console is reached by with --allow-host", *listen)
		case opts.Authenticate == nil && !*proxied:
			return usagef("--listen %s is beyond loopback and the console authenticates nobody: pass --token-file, or --behind-auth-proxy if a proxy authenticates every request", *listen)
		}
	}
	if slices.Contains(opts.Hosts, "*") && opts.Authenticate == nil && !*proxied {
		// No Host check: a page under a rebound name reaches even a
		// loopback console, and only credentials it lacks stop it.
		return usagef("--allow-host * answers to any name, so a DNS-rebinding page could use the console: pass --token-file, or --behind-auth-proxy if a proxy authenticates every request")
	}
	if *sampleEvery <= 0 {
		return usagef("--sample-every must be positive (%s)", *sampleEvery)
	}
	if schemas.set() && *slot != "" {
		return usagef("--slot: WAL mode serves one table; not with --schemas")
	}
	if common.mysql() && schemas.set() {
		return usagef("--schemas: not on MySQL/MariaDB, where a schema is a database: run a console per database, each named in --database-url (see docs/mysql.md)")
	}
	opts.SampleEvery = *sampleEvery
	logger := slog.New(slog.NewTextHandler(proc.stderr, &slog.HandlerOptions{Level: level}))
	if common.json {
		logger = slog.New(slog.NewJSONHandler(proc.stderr, &slog.HandlerOptions{Level: level}))
	}
	opts.Logger = logger
	acfg := outboxadmin.Config{StaleAfter: *staleAfter, Slot: *slot}
	var (
		handler http.Handler
		sample  func(context.Context) error // the overview's history; none for many tables
		db      *sql.DB
	)
	if schemas.set() {
		opts.DiscoverInterval = schemas.discover
		var m *console.Multi
		if m, db, err = openMulti(ctx, &common, &schemas, acfg, opts); err != nil {
			return err
		}
		handler = m
	} else {
		need := readerGrants
		if opts.AllowWrites {
			need = operatorGrants
		}
		var adm *outboxadmin.Admin
		if adm, db, err = openAdmin(ctx, &common, acfg, need); err != nil {
			return err
		}
		con, err := console.New(adm, opts)
		if err != nil {
			db.Close()
			return usagef("%v", err)
		}
		handler, sample = con, con.Run
		logger.Info("connected to the database", "database", redactDatabaseURL(common.databaseURL), "table", adminTable(&common))
	}
	defer db.Close()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	if !hostname.IsLoopback(host) && opts.Authenticate == nil {
		logger.Warn("the console listens beyond loopback and authenticates nobody (--behind-auth-proxy)", "listen", *listen, "hosts", opts.Hosts)
	}
	mode := "read-only"
	if opts.AllowWrites {
		mode = "writes allowed"
	}
	fmt.Fprintf(stdout, "serving the outbox console (%s) on http://%s/\n", mode, ln.Addr())

	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sampled := make(chan error, 1)
	if sample == nil {
		sampled <- nil
	} else {
		go func() { sampled <- sample(ctx) }()
	}
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
