// Package gormoutbox is a GORM plugin that writes domain events into the
// txoutbox outbox table in the model's own transaction: the order row and
// its "order.placed" event commit together or not at all, and the relay
// publishes the event afterwards.
//
//	p, err := gormoutbox.New(gormoutbox.Config{DefaultTopic: "orders"})
//	err = db.Use(p)
//	order.Place()           // domain code: o.Record("order.placed", placed)
//	err = db.Create(&order).Error // the order row and its outbox row, one transaction
//
// # Recording events
//
// A model embeds Events (tagged `gorm:"-"`) and its domain methods call
// Record. Create, Save, Updates and Delete write the model's pending events
// with one insert, right after GORM's After hooks (so an AfterCreate hook
// can record an event that needs the new primary key) and before GORM
// commits, using the statement's transaction and context; then they empty
// the recorder. Single models, slices, slices of pointers and
// CreateInBatches work; has-many and other associations GORM saves are
// nested statements in the same transaction, so their events are written
// by those statements, before the parent's.
//
// An event recorded with Record leaves its topic, aggregate type and
// aggregate id to the write: the aggregate id is the model's primary key at
// write time, so events recorded before a Create carry the key the insert
// assigned. The topic comes from the model's OutboxTopic method or
// Config.DefaultTopic, the aggregate type from OutboxAggregateType or the
// snake_cased type name. RecordEvent takes a complete txoutbox.Event for
// anything else (another aggregate, headers, a non-JSON payload).
//
// Models that implement ChangeEventer get change events with no domain
// code: "<aggregate>.created", ".updated" and ".deleted", the model as JSON
// after the write, keyed by the primary key.
//
// Record from pointer-receiver methods and hooks: a value receiver records
// on a copy, and the event is lost. Embed Events by value, not *Events.
//
// For code without a model at hand, Emit writes events on the tx of
// db.Transaction.
//
// # Which saves write what
//
//   - A statement that changed no row writes nothing and keeps the events:
//     Save of a key that does not exist is an update of 0 rows followed by
//     a create, and the create writes the events, once.
//   - DryRun and ToSQL write nothing and keep the events.
//   - Save of a slice is GORM's upsert (the create chain), so change events
//     of its rows are ".created" even for rows that existed. A create with
//     ON CONFLICT DO NOTHING that inserted some rows writes the events of
//     all the statement's models: GORM does not say which rows it skipped.
//   - A statement that failed (or whose events were invalid, or whose
//     outbox insert failed) returns the error, GORM rolls the model write
//     back, and the recorder is emptied: a later, unrelated save of the same
//     model never carries events of a failed attempt.
//   - Events written in a transaction that later rolls back (the caller's
//     db.Transaction, or a savepoint of a nested one) roll back with it and
//     are not recorded any more. The retry rule: retry the whole unit of
//     work, the domain code that records included, not just the save.
//   - Bulk statements (db.Model(&Order{}).Where(...).Updates, Delete) hold
//     no model instances. For recording models they write nothing; use Emit
//     in the same transaction. For change-event models they are refused
//     with ErrNoRowData before any SQL runs, unless they carry
//     Clauses(clause.Returning{}) with a slice target, which yields one
//     change event per returned row. Statements without a model
//     (db.Table("orders")) are never intercepted.
//
// # Transactions
//
// GORM runs Create, Save, Updates and Delete in a transaction unless
// SkipDefaultTransaction is set (globally or per Session). A statement that
// is not in a transaction and has events to write (pending events, a hook
// that may record one, or a change-event model) is refused with
// ErrNoTransaction before any SQL or hook runs, by default. With
// Config.TxPolicy = TxBegin the plugin instead opens a transaction around
// the model write and the outbox insert, as GORM's own would. Statements of
// other models, or with nothing to write, are left alone either way. Inside
// db.Transaction, or with PrepareStmt, the statement's own transaction is
// used; the outbox row never lands outside it.
//
// db.Use reports GORM's error when the plugin's callbacks conflict with the
// order another plugin registered; GORM leaves that *gorm.DB unusable.
package gormoutbox
