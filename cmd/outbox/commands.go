package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
)

// command is one entry of the command table: a leaf runs, a group hands
// its arguments to one of its subcommands. Dispatch, the list of commands
// and the "want a subcommand" errors all come from the table, so a command
// added here is listed and reachable at once.
type command struct {
	name string
	// summary is the line of `outbox help` (top-level commands only).
	summary string
	// usage is a leaf's synopsis after its path, as the package doc shows
	// it (TestPackageDocListsEveryCommand keeps the two in step).
	usage string
	// run is a leaf's body. fs is its FlagSet, named after the command's
	// path ("outbox dead list") and empty: run registers its flags and
	// parses args with proc (proc.parseFlags).
	run func(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error
	// subcommands make a group.
	subcommands []*command
	// unknownAsMissing answers an unknown subcommand with the message of a
	// missing one, as migrate always has.
	unknownAsMissing bool
	// mysql marks a leaf that runs on MySQL/MariaDB; every other leaf
	// refuses a MySQL --database-url once its flags are parsed
	// (refuseMySQL), before it connects to anything.
	mysql bool
}

// withAction is the run of subcommand action of a family that shares its
// flags and its code, as dead retry and drop, or the migrate actions, do.
func withAction(action string, run func(context.Context, *process, *flag.FlagSet, string, []string) error) func(context.Context, *process, *flag.FlagSet, []string) error {
	return func(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
		return run(ctx, proc, fs, action, args)
	}
}

// commands is the command table, in the order `outbox help` lists it.
var commands = []*command{
	{name: "dead", summary: "list, show, retry or drop dead events", subcommands: []*command{
		{name: "list", usage: "[--topic T] [--aggregate A] [--type E] [--since 24h] [--limit N] [--after ID]", run: runDeadList, mysql: true},
		{name: "show", usage: "ID [--full]", run: runDeadShow, mysql: true},
		{name: "retry", usage: "ID... | --topic T ... | --all [--dry-run]", run: withAction("retry", runDeadChange), mysql: true},
		{name: "drop", usage: "ID... | --topic T ... | --all --yes|--dry-run", run: withAction("drop", runDeadChange), mysql: true},
	}},
	{name: "migrate", summary: "apply, revert, show or export the schema migrations (outbox or inbox); partition the outbox", unknownAsMissing: true, subcommands: []*command{
		{name: "up", usage: "[--set outbox|inbox] [--schemas PATTERN]", run: withAction("up", runMigrate), mysql: true},
		{name: "down", usage: "[--set outbox|inbox]", run: withAction("down", runMigrate), mysql: true},
		{name: "status", usage: "[--set outbox|inbox]", run: withAction("status", runMigrate), mysql: true},
		{name: "export", usage: "--format goose|golang-migrate --dir DIR", run: withAction("export", runMigrate), mysql: true},
		{name: "partition", usage: "[--size 1000000]", run: withAction("partition", runMigrate), mysql: true},
	}},
	{name: "relay", summary: "run the relay: publish the outbox to Kafka until SIGINT/SIGTERM",
		usage: "--brokers B | --dev-broker [--schemas PATTERN] [--tls-ca F] [--sasl-mechanism M] [--metrics-addr :9464]", run: runRelay, mysql: true},
	{name: "replay", summary: "publish again the events published since a time, through the relays",
		usage: "--since 2h [--topic T] [--aggregate A] [--dry-run]", run: runReplay, mysql: true},
	{name: "status", summary: "show backlog, lag and dead events, and the relays with their shards",
		usage: "[--schemas PATTERN] [--max-lag 1m] [--stale-after 15s]", run: runStatus, mysql: true},
	{name: "ui", summary: "serve the web console: overview, relays, dead letters, events, replay",
		usage: "[--schemas PATTERN] [--listen 127.0.0.1:8080] [--allow-writes] [--allow-host H --token-file F | --behind-auth-proxy]", run: runUI, mysql: true},
	{name: "wal", summary: "WAL mode: takeover hands the outbox from the WAL relays back to the polling relay", subcommands: []*command{
		{name: "takeover", usage: "[--slot S] [--publication P] [--force]", run: runWALTakeover},
	}},
}

// lookup finds the top-level command name.
func lookup(name string) (*command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return nil, false
}

// dispatch runs c with args, descending through groups to a leaf. path is
// the command line up to c ("outbox dead").
func (c *command) dispatch(ctx context.Context, proc *process, path string, args []string) error {
	path += " " + c.name
	if c.run != nil {
		proc.mysqlOK = c.mysql
		return c.run(ctx, proc, flag.NewFlagSet(path, flag.ContinueOnError), args)
	}
	names := make([]string, len(c.subcommands))
	for i, sub := range c.subcommands {
		names[i] = sub.name
	}
	want := orList(names)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usagef("want a subcommand: %s", want)
	}
	for _, sub := range c.subcommands {
		if sub.name == args[0] {
			return sub.dispatch(ctx, proc, path, args[1:])
		}
	}
	if c.unknownAsMissing {
		return usagef("want a subcommand: %s", want)
	}
	return usagef("unknown subcommand %q: want %s", args[0], want)
}

// orList joins names for a message: "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// printUsage writes the list of commands, for `outbox help` and bad input.
func printUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("usage: outbox <command> [flags]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-10s %s\n", c.name, c.summary)
	}
	b.WriteString("\nRun 'outbox <command> -h' for a command's flags.\n")
	io.WriteString(w, b.String())
}
