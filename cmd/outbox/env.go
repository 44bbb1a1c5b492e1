package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// EnvPrefix prefixes the environment variable of every flag: --max-lag is
// also OUTBOX_MAX_LAG. A deployment configures the commands entirely from
// its environment (a Kubernetes Secret, a systemd EnvironmentFile), and a
// flag on the command line still wins.
const EnvPrefix = "OUTBOX_"

// legacyEnv are the variables read before EnvPrefix existed, still honoured
// after the prefixed one: the ecosystem's usual names.
var legacyEnv = map[string]string{
	"database-url": "DATABASE_URL",
	"brokers":      "KAFKA_BROKERS",
}

// envName is the variable of a flag: OUTBOX_ and the name in upper case with
// dashes as underscores.
func envName(flagName string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// process is what a command reads from and writes to its process besides
// its arguments: the environment, stdout and stderr. main passes the real
// one to run, which hands it to every command as an argument; tests give
// each run their own, so none reads the test process's environment and
// runs stay parallel. One exception: the OTLP exporter and the OTel
// resource read their OTEL_* settings from the real environment (see
// tracing); lookupEnv only decides whether tracing is on.
type process struct {
	lookupEnv      func(string) (string, bool)
	stdout, stderr io.Writer
	// fromEnv lists the variables applyEnv used, for usage errors.
	fromEnv []string
	// mysqlOK is the running command's mysql field: applyEnv, where
	// every command's parsing ends, refuses a MySQL --database-url unless
	// it is set.
	mysqlOK bool
}

// applyEnv sets every flag the command line did not set from its
// variable, or its legacy variable, so flags win over the environment. A
// bad value is a usage error naming the variable. commandLineOnly flags are
// never read from the environment: those that choose or confirm what a
// command changes (--all, --yes, the selection of retry, drop and replay),
// so a variable left in a shell cannot widen a destructive command.
func (proc *process) applyEnv(fs *flag.FlagSet, commandLineOnly ...string) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] || slices.Contains(commandLineOnly, f.Name) {
			return
		}
		name := envName(f.Name)
		v, ok := proc.lookupEnv(name)
		if !ok && legacyEnv[f.Name] != "" {
			name = legacyEnv[f.Name]
			v, ok = proc.lookupEnv(name)
		}
		if !ok || v == "" {
			return
		}
		if serr := fs.Set(f.Name, v); serr != nil {
			err = usageError{fmt.Sprintf("%s=%q: invalid value for --%s: %v", name, v, f.Name, serr)}
			return
		}
		if !slices.Contains(proc.fromEnv, name) {
			proc.fromEnv = append(proc.fromEnv, name)
		}
	})
	if err == nil && !proc.mysqlOK {
		err = refuseMySQL(fs)
	}
	return err
}

// documentEnv appends each flag's variable to its help text, so -h shows
// how to set it from the environment.
func documentEnv(fs *flag.FlagSet, commandLineOnly ...string) {
	fs.VisitAll(func(f *flag.Flag) {
		if slices.Contains(commandLineOnly, f.Name) {
			f.Usage += " (command line only)"
			return
		}
		f.Usage += " [$" + envName(f.Name)
		if legacy := legacyEnv[f.Name]; legacy != "" {
			f.Usage += ", $" + legacy
		}
		f.Usage += "]"
	})
}
