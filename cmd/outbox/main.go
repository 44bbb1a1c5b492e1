// Command outbox operates a txoutbox outbox: it migrates the schema, runs
// the relay, shows the outbox's health, and handles dead events and replays.
//
//	outbox migrate up [--set outbox|inbox] [--schemas PATTERN]
//	outbox migrate down [--set outbox|inbox]
//	outbox migrate status [--set outbox|inbox]
//	outbox migrate export --format goose|golang-migrate --dir DIR
//	outbox migrate partition [--size 1000000]
//	outbox relay --brokers B | --dev-broker [--schemas PATTERN] [--tls-ca F] [--sasl-mechanism M] [--metrics-addr :9464]
//	outbox status [--schemas PATTERN] [--max-lag 1m] [--stale-after 15s]
//	outbox dead list [--topic T] [--aggregate A] [--type E] [--since 24h] [--limit N] [--after ID]
//	outbox dead show ID [--full]
//	outbox dead retry ID... | --topic T ... | --all [--dry-run]
//	outbox dead drop ID... | --topic T ... | --all --yes|--dry-run
//	outbox replay --since 2h [--topic T] [--aggregate A] [--dry-run]
//	outbox ui [--schemas PATTERN] [--listen 127.0.0.1:8080] [--allow-writes] [--allow-host H --token-file F | --behind-auth-proxy]
//	outbox wal takeover [--slot S] [--publication P] [--force]
//
// Every flag can also be set in the environment as OUTBOX_ and its name in
// upper case with underscores (--max-lag: OUTBOX_MAX_LAG); the command line
// wins. DATABASE_URL and KAFKA_BROKERS are read after OUTBOX_DATABASE_URL
// and OUTBOX_BROKERS. The flags that choose or confirm what dead retry,
// dead drop and replay change are read from the command line only.
//
// relay, status, ui and migrate up take --schemas PATTERN instead of
// --schema for the outbox tables of many schemas (a schema per tenant):
// every schema matching the pattern ('tenant_*'), or each of a
// comma-separated list, each with its --table.
//
// --database-url names PostgreSQL (a postgres:// URL or a keyword/value
// string) or MySQL/MariaDB: mysql://USER:PASSWORD@HOST:PORT/DATABASE, or
// go-sql-driver/mysql's own USER:PASSWORD@tcp(HOST:PORT)/DATABASE (told by
// its @tcp( or @unix( address). On MySQL migrate up, status, down and
// export, relay (--mode poll), status, dead, replay and ui run, without
// --schema or --schemas (a schema is a database there) and without --slot
// (no WAL relay); wal and migrate partition refuse a MySQL URL at
// start-up (exit 2). See docs/mysql.md.
//
// Every command takes --database-url, --schema and --table. Output is for
// humans unless --json is given; values from the database are printed with
// control and bidirectional characters escaped. Exit codes: 0 success, 1
// failure (including an event that does not exist or is not dead), 2 bad
// usage (nothing touched), 3 the lag exceeds status's --max-lag (with
// --schemas, before 1 for a table that could not be read).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// exitUsage is the exit code of bad input: a flag, a variable, an argument.
// Nothing was touched.
const exitUsage = 2

// usageError is bad input: exit code 2, and nothing was touched.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &process{lookupEnv: os.LookupEnv, stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

// run executes the command line in proc and returns the exit code. main
// is the only caller that hands it the real process.
func run(ctx context.Context, proc *process, args []string) int {
	stderr := proc.stderr
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	cmd, ok := lookup(args[0])
	if !ok {
		fmt.Fprintf(stderr, "outbox: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return exitUsage
	}
	err := cmd.dispatch(ctx, proc, "outbox", args[1:])
	var uerr usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "outbox %s: %s\n", args[0], uerr.msg)
		if len(proc.fromEnv) > 0 {
			fmt.Fprintf(stderr, "(settings taken from the environment: %s)\n", strings.Join(proc.fromEnv, ", "))
		}
		return exitUsage
	case errors.As(err, new(exitError)):
		fmt.Fprintf(stderr, "outbox %s: %v\n", args[0], err)
		return err.(exitError).code
	default:
		fmt.Fprintf(stderr, "outbox %s: %v\n", args[0], err)
		return 1
	}
}

// exitError ends the command with a specific exit code, e.g. a health check
// that found the lag too high.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }
