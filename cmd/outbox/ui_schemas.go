package main

import (
	"context"
	"database/sql"
	"log/slog"
	"sync"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
	"github.com/txoutbox/txoutbox/relay"
)

// openMulti is `outbox ui --schemas`: the console of every table --schemas
// selects, found again every --discover-interval. A selection of no schema
// at all fails at start (exit 1), as relay, status and migrate up do; one
// whose schemas have no migrated outbox table yet (tenants to come)
// starts, with a warning, and lists them once they have. The caller closes
// db.
func openMulti(ctx context.Context, common *commonFlags, schemas *schemasFlag, acfg outboxadmin.Config, opts console.Options) (*console.Multi, *sql.DB, error) {
	db, cfg, found, err := schemas.openTables(ctx, common)
	if err != nil {
		return nil, nil, err
	}
	log := opts.Logger
	list := listTables(db, cfg, log)
	served := 0
	for _, f := range found {
		if unserved(f) == "" {
			served++
		}
	}
	if served == 0 {
		log.Warn("no selected schema has a migrated outbox table yet: the console lists none until one has (outbox migrate up --schemas)",
			"schemas", schemas.value, "selected", len(found))
	}
	m, err := console.NewMulti(db, acfg, list, opts)
	if err != nil {
		db.Close()
		return nil, nil, usagef("%v", err)
	}
	log.Info("connected to the database", "database", redactDatabaseURL(common.databaseURL), "schemas", schemas.value,
		"selected", len(found), "tables", served)
	return m, db, nil
}

// listTables lists the migrated tables cfg selects, for a console.Multi.
// A selected schema it leaves out (no outbox table, not migrated) is
// logged once per reason, as a relay group does.
func listTables(db *sql.DB, cfg relay.GroupConfig, log *slog.Logger) func(context.Context) ([]txoutbox.Table, error) {
	var (
		mu      sync.Mutex
		skipped = map[string]string{} // schema → why, as last logged
	)
	return func(ctx context.Context) ([]txoutbox.Table, error) {
		found, err := relay.FindTables(ctx, db, cfg)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		var out []txoutbox.Table
		for _, f := range found {
			why := unserved(f)
			if why == "" {
				delete(skipped, f.Table.Schema)
				out = append(out, f.Table)
				continue
			}
			if skipped[f.Table.Schema] != why {
				skipped[f.Table.Schema] = why
				log.Warn("outbox console: not showing a selected schema's table", "table", tableName(f.Table), "reason", why)
			}
		}
		return out, nil
	}
}
