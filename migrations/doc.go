// Package migrations embeds txoutbox's versioned SQL schema and applies it.
//
//	m, err := migrations.New(db, migrations.Config{})
//	applied, err := m.Up(ctx) // idempotent; safe from many processes at once
//
// The SQL lives in plain NNNN_name.up.sql / NNNN_name.down.sql files (see
// Set.FS and the migrations/outbox directory), so teams that run their own
// migration tool can use them instead: golang-migrate reads the directory as
// it is, and Atlas imports it with format=golang-migrate. goose needs one
// annotated file per version: Migrator.Export (and `outbox migrate export`)
// writes those, and either format with the tables renamed for a custom
// Config.Table; this migrator renames them as it applies them.
//
// The migrator records applied versions in <table>_schema_migrations and
// runs each Up, Down or Status in one transaction under an advisory lock, so
// concurrent deploys apply every version exactly once. Check reads them
// without changing anything: the relays, outboxadmin and the outbox command
// refuse a table older than they need (ErrSchemaTooOld: run `outbox migrate
// up`) or with a version this release does not know (ErrSchemaTooNew, which
// Up and Down refuse too).
package migrations
