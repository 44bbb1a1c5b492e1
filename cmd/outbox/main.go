// Command outbox operates a txoutbox outbox: it migrates the schema, runs
// the relay, shows the outbox's health, and handles dead events and replays.
//
//	outbox migrate up|down|status [--set outbox|inbox]
//	outbox migrate export --format goose|golang-migrate --dir DIR
//	outbox relay --brokers B | --dev-broker [--tls-ca F] [--sasl-mechanism M] [--metrics-addr :9464]
//	outbox status [--max-lag 1m] [--stale-after 15s]
//	outbox dead list [--topic T] [--aggregate A] [--type E] [--since 24h] [--limit N] [--after ID]
//	outbox dead show ID
//	outbox dead retry ID... | --topic T ... | --all [--dry-run]
//	outbox dead drop ID... | --topic T ... | --all --yes|--dry-run
//	outbox replay --since 2h [--topic T] [--aggregate A] [--dry-run]
//	outbox ui [--listen 127.0.0.1:8080] [--allow-writes] [--allow-host H --token-file F | --behind-auth-proxy]
//
// Every flag can also be set in the environment as OUTBOX_ and its name in
// upper case with underscores (--max-lag: OUTBOX_MAX_LAG); the command line
// wins. DATABASE_URL and KAFKA_BROKERS are read after OUTBOX_DATABASE_URL
// and OUTBOX_BROKERS. The flags that choose or confirm what dead retry,
// dead drop and replay change are read from the command line only.
//
// Every command takes --database-url, --schema and --table. Output is for
// humans unless --json is given; values from the database are printed with
// control and bidirectional characters escaped. Exit codes: 0 success, 1
// failure (including an event that does not exist or is not dead), 2 bad
// usage (nothing touched), 3 the lag exceeds status's --max-lag.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one subcommand. run returns a usageError for bad input.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

// commands is the command tree; later subcommands register here.
var commands = map[string]command{
	"migrate": {summary: "apply, revert, show or export the schema migrations (outbox or inbox)", run: runMigrate},
}

// exitUsage is the exit code of bad input: a flag, a variable, an argument.
// Nothing was touched.
const exitUsage = 2

// usageError is bad input: exit code 2, and nothing was touched.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line with the process's environment and returns
// the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runIn(ctx, &process{lookupEnv: os.LookupEnv, stderr: stderr}, args, stdout)
}

// runIn executes the command line in proc and returns the exit code.
func runIn(ctx context.Context, proc *process, args []string, stdout io.Writer) int {
	stderr := proc.stderr
	ctx = withProcess(ctx, proc)
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printUsage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "outbox: unknown command %q\n\n", args[0])
		printUsage(stderr)
		return exitUsage
	}
	err := cmd.run(ctx, args[1:], stdout)
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

func printUsage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: outbox <command> [flags]\n\ncommands:\n")
	for _, name := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", name, commands[name].summary)
	}
	b.WriteString("\nRun 'outbox <command> -h' for a command's flags.\n")
	io.WriteString(w, b.String())
}
