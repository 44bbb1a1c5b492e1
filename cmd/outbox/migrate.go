package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/migrations"
)

// runMigrate is every `outbox migrate action`: they share their flags and
// their reading of the environment.
func runMigrate(ctx context.Context, proc *process, fs *flag.FlagSet, action string, args []string) error {
	stdout := proc.stdout
	var (
		common  commonFlags
		schemas schemasFlag
	)
	common.register(fs)
	schemas.register(fs)
	set := fs.String("set", "outbox", "which schema to migrate: outbox (the outbox and relay tables) or inbox (the consumers' processed-events table)")
	format := fs.String("format", migrations.FormatGoose, "export: goose or golang-migrate")
	dir := fs.String("dir", "", "export: directory to write the files to (created if missing)")
	size := fs.Int64("size", migrations.PartitionSizeDefault, "partition: ids per partition, for an outbox not partitioned yet (see docs/partitions.md)")
	if err := proc.parseArgs(fs, args); err != nil {
		return err
	}
	// OUTBOX_TABLE names the outbox table: the inbox's table comes from
	// --table or is "inbox".
	tableOnCommandLine := flagSet(fs, "table")
	if err := proc.applyEnv(fs, "table"); err != nil {
		return err
	}
	if *set == "outbox" && !tableOnCommandLine {
		if err := proc.applyEnv(fs); err != nil {
			return err
		}
	}
	var migrationSet migrations.Set
	switch *set {
	case "outbox":
		migrationSet = migrations.Outbox
	case "inbox":
		migrationSet = migrations.Inbox
		if !tableOnCommandLine {
			common.table = "inbox"
		}
	default:
		return usagef("--set: want outbox or inbox, not %q", *set)
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if action == "partition" && *set != "outbox" {
		return usagef("--set: only the outbox is partitioned")
	}
	if common.mysql() {
		switch {
		case schemas.set():
			// A schema is a database on MySQL; a pattern over databases
			// would be a second meaning of the flag, for servers where one
			// database per tenant is rare next to one per service.
			return usagef("--schemas: not on MySQL/MariaDB, where a schema is a database: run migrate up once per database, each named in --database-url")
		case action == "partition":
			return usagef("partition: an outbox on MySQL/MariaDB is not partitioned (see docs/mysql.md)")
		}
	}
	if schemas.set() {
		if action != "up" {
			return usagef("--schemas: only migrate up applies to many schemas at once")
		}
		db, _, found, err := schemas.openTables(ctx, &common)
		if err != nil {
			return err
		}
		defer db.Close()
		return migrateTables(ctx, stdout, db, migrationSet, found, common.json)
	}
	table, err := common.outboxTable()
	if err != nil {
		return err
	}
	if action == "export" {
		return exportMigrations(migrationSet, table.Name, common.mysql(), *format, *dir, stdout)
	}
	db, err := common.open(ctx)
	if err != nil {
		return err
	}
	defer db.Close()
	m, err := migrations.New(db, migrations.Config{Set: migrationSet, Table: table})
	if err != nil {
		return usagef("%v", err)
	}

	switch action {
	case "partition":
		// Converts an outbox not partitioned yet, and creates the
		// partitions missing ahead: run it again from a job when the
		// relays' role does not own the table.
		if err := m.Partition(ctx, *size); err != nil {
			return err
		}
		if common.json {
			return printJSON(stdout, map[string]any{"partitioned": true})
		}
		fmt.Fprintln(stdout, "the outbox is partitioned, with its partitions ahead")
	case "up":
		applied, err := m.Up(ctx)
		if err != nil {
			return err
		}
		if common.json {
			return printJSON(stdout, map[string]any{"applied": nonNil(applied)})
		}
		if len(applied) == 0 {
			fmt.Fprintln(stdout, "schema is up to date")
		} else {
			fmt.Fprintf(stdout, "applied version(s) %s\n", joinInts(applied))
		}
	case "down":
		v, err := m.Down(ctx)
		if err != nil {
			return err
		}
		if common.json {
			return printJSON(stdout, map[string]any{"reverted": v})
		}
		if v == 0 {
			fmt.Fprintln(stdout, "nothing to revert")
		} else {
			fmt.Fprintf(stdout, "reverted version %d\n", v)
		}
	case "status":
		st, err := m.Status(ctx)
		if err != nil {
			return err
		}
		if common.json {
			return printJSON(stdout, st)
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
		var unknown []int
		for _, s := range st {
			applied := "pending"
			if s.AppliedAt != nil {
				applied = s.AppliedAt.Format("2006-01-02 15:04:05 MST")
			}
			if s.Unknown {
				applied += "  unknown to this outbox"
				unknown = append(unknown, s.Version)
			}
			fmt.Fprintf(tw, "%04d\t%s\t%s\n", s.Version, oneLine(s.Name, 80), applied)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(unknown) > 0 {
			fmt.Fprintf(stdout, "version(s) %s were applied by a newer txoutbox: this binary's migrate up and down, relays and tools refuse the table; run the release that knows them\n",
				joinInts(unknown))
		}
	}
	return nil
}

// exportMigrations writes the set's files for another migration tool:
// MySQL's if mysql (a MySQL --database-url), else PostgreSQL's. It needs
// no database.
func exportMigrations(set migrations.Set, tableName string, mysql bool, format, dir string, stdout io.Writer) error {
	if dir == "" {
		return usagef("export: --dir is required")
	}
	if format != migrations.FormatGoose && format != migrations.FormatGolangMigrate {
		return usagef("--format: want %s or %s, not %q", migrations.FormatGoose, migrations.FormatGolangMigrate, format)
	}
	driver, dsn, dialect := "pgx", "postgres://export-only", txoutbox.PostgreSQL
	if mysql {
		driver, dsn, dialect = "mysql", "export-only@tcp(127.0.0.1:3306)/export", txoutbox.MySQL
	}
	lazy, err := sql.Open(driver, dsn) // never connected to
	if err != nil {
		return err
	}
	defer lazy.Close()
	m, err := migrations.New(lazy, migrations.Config{Set: set, Table: txoutbox.Table{Name: tableName}, Dialect: dialect})
	if err != nil {
		return usagef("%v", err)
	}
	files, err := m.Export(format)
	if err != nil {
		return usagef("%v", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for _, f := range files {
		path := filepath.Join(dir, f.Name)
		if err := os.WriteFile(path, []byte(f.Body), 0o644); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		fmt.Fprintln(stdout, path)
	}
	return nil
}

// flagSet reports whether the flag was set, on the command line or, once
// applyEnv ran, from the environment.
func flagSet(fs *flag.FlagSet, name string) bool {
	found := false
	fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}

func nonNil(v []int) []int {
	if v == nil {
		return []int{}
	}
	return v
}
