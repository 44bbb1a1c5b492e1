package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/human"
)

// errHelp is returned when -h was asked for; the usage is already printed.
var errHelp = errors.New("help requested")

// commonFlags are the flags every command that touches the database takes.
type commonFlags struct {
	databaseURL string
	schema      string
	table       string
	json        bool
	// lockTimeout, when set by the command, is the lock_timeout of every
	// session open opens: a statement waiting longer for a lock another
	// session holds fails (SQLSTATE 55P03) rather than hang. On MySQL it
	// is lock_wait_timeout, a table's metadata lock's (error 1205), in
	// whole seconds, at least one.
	lockTimeout time.Duration
}

// mysql reports whether --database-url names MySQL or MariaDB.
func (c *commonFlags) mysql() bool { return isMySQL(c.databaseURL) }

func (c *commonFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.databaseURL, "database-url", "", "PostgreSQL URL (postgres://...) or keyword/value string; or MySQL/MariaDB: mysql://USER:PASSWORD@HOST:PORT/DATABASE or the driver's USER:PASSWORD@tcp(HOST:PORT)/DATABASE")
	fs.StringVar(&c.schema, "schema", "", "schema of the outbox table (default: the search_path; not on MySQL, where the database in --database-url is the schema)")
	fs.StringVar(&c.table, "table", txoutbox.TableNameDefault, "name of the outbox table")
	fs.BoolVar(&c.json, "json", false, "print JSON for scripts instead of text for humans")
}

// outboxTable validates the table flags.
func (c *commonFlags) outboxTable() (txoutbox.Table, error) {
	if c.schema != "" && c.mysql() {
		return txoutbox.Table{}, usagef("--schema: on MySQL/MariaDB a schema is a database: name it in --database-url (mysql://USER:PASSWORD@HOST:PORT/DATABASE)")
	}
	t := txoutbox.Table{Schema: c.schema, Name: c.table}
	if err := t.Validate(); err != nil {
		return t, usagef("%v", err)
	}
	return t, nil
}

// open connects to the database and checks it answers.
func (c *commonFlags) open(ctx context.Context) (*sql.DB, error) {
	if c.databaseURL == "" {
		return nil, usagef("no database: pass --database-url or set DATABASE_URL")
	}
	var db *sql.DB
	if c.mysql() {
		var err error
		if db, err = openMySQL(c.databaseURL, c.lockTimeout); err != nil {
			return nil, err
		}
	} else if c.lockTimeout > 0 {
		cfg, err := pgx.ParseConfig(c.databaseURL)
		if err != nil {
			return nil, fmt.Errorf("connect to database: %w", err)
		}
		cfg.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(c.lockTimeout.Milliseconds(), 1), 10)
		db = stdlib.OpenDB(*cfg)
	} else {
		var err error
		if db, err = sql.Open("pgx", c.databaseURL); err != nil {
			return nil, usagef("--database-url: %v", err)
		}
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := db.PingContext(pingCtx); err != nil {
		db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return db, nil
}

// parseFlags parses args into fs, then fills the flags the command line
// left unset from the environment (see applyEnv), turning errors of either
// into usage errors.
func (proc *process) parseFlags(fs *flag.FlagSet, args []string, commandLineOnly ...string) error {
	if err := proc.parseArgs(fs, args, commandLineOnly...); err != nil {
		return err
	}
	return proc.applyEnv(fs, commandLineOnly...)
}

// parseFlagsOnly is parseFlags for a command that takes flags only: an
// argument left after them is a usage error.
func (proc *process) parseFlagsOnly(fs *flag.FlagSet, args []string, commandLineOnly ...string) error {
	if err := proc.parseFlags(fs, args, commandLineOnly...); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	return nil
}

// parseArgs parses the command line alone. The flag package prints its own
// message and usage to the FlagSet's output, which is discarded but for -h,
// whose usage goes to proc.stderr.
func (proc *process) parseArgs(fs *flag.FlagSet, args []string, commandLineOnly ...string) error {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			documentEnv(fs, commandLineOnly...)
			fs.SetOutput(proc.stderr)
			fs.Usage()
			return errHelp
		}
		return usagef("%v", err)
	}
	return nil
}

// printJSON writes v as indented JSON, or compact when indented it would
// pass jsonIndentMax (a deeply nested payload, whose indentation grows with
// the square of its depth). Characters a terminal or an editor would act
// on (C1 controls, bidirectional formatting) are written as \u escapes,
// which decode to the same strings.
func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if out, ok := human.IndentJSON(b, max(8*len(b), jsonIndentMax)); ok {
		b = out
	}
	b = append(human.EscapeJSON(b), '\n')
	_, err = w.Write(b)
	return err
}

// jsonIndentMax is the least output printJSON allows its indentation.
const jsonIndentMax = 1 << 20

// joinInts renders versions for humans.
func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// keywordPassword finds the password of a keyword/value connection string
// (host=db password=secret).
var keywordPassword = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// redactDatabaseURL is a connection string for the log: where it connects
// and as whom, never the password.
func redactDatabaseURL(raw string) string {
	if isMySQL(raw) && !strings.Contains(raw, "://") {
		return redactMySQLDSN(raw)
	}
	if !strings.Contains(raw, "://") {
		return keywordPassword.ReplaceAllString(raw, "${1}xxxxx")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	if q := u.Query(); q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}
