package gormoutbox

import (
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/txoutbox/txoutbox"
)

// op is the statement kind a callback is registered for.
type op int

const (
	opCreate op = iota
	opUpdate
	opDelete
)

func (o op) String() string {
	switch o {
	case opCreate:
		return "create"
	case opUpdate:
		return "update"
	}
	return "delete"
}

// changeSuffix is the event type suffix of change events.
func (o op) changeSuffix() string { return "." + o.String() + "d" }

// hooksMayRecord reports whether the model's own hooks, which run between
// the ensure and write callbacks, could record events for this statement.
func (o op) hooksMayRecord(s *schema.Schema) bool {
	switch o {
	case opCreate:
		return s.BeforeSave || s.BeforeCreate || s.AfterCreate || s.AfterSave
	case opUpdate:
		return s.BeforeSave || s.BeforeUpdate || s.AfterUpdate || s.AfterSave
	}
	return s.BeforeDelete || s.AfterDelete
}

// startedKey marks, in the statement's instance settings, a transaction
// the plugin opened (TxBegin); the value is the pool to restore.
const startedKey = "gormoutbox:started_transaction"

// inTransaction is GORM's own test (db.Transaction uses it for nesting). A
// check for *sql.Tx alone would miss *gorm.PreparedStmtTX under PrepareStmt.
func inTransaction(db *gorm.DB) bool {
	c, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok && c != nil && !reflect.ValueOf(c).IsNil()
}

// ensure runs before the model's hooks and before any SQL of the statement.
// It refuses bulk statements that cannot produce change events, and makes
// sure a statement that will write events runs in a transaction.
func (p *Plugin) ensure(o op) func(*gorm.DB) {
	return func(db *gorm.DB) {
		stmt := db.Statement
		if db.Error != nil || db.DryRun || stmt.Schema == nil {
			return
		}
		info := infoOf(stmt.Schema)
		if !info.records && !info.changes {
			return
		}
		if info.changes && o != opCreate && !hasRowData(stmt.Context, stmt.Schema, stmt.ReflectValue) {
			if _, ok := stmt.Clauses["RETURNING"]; !ok {
				db.AddError(fmt.Errorf("%w: %s of %s; add Clauses(clause.Returning{}) with a slice target, or use Emit",
					ErrNoRowData, o, info.aggregateType))
				return
			}
		}
		if inTransaction(db) {
			return
		}
		if !info.changes && !o.hooksMayRecord(stmt.Schema) && !anyPending(stmt.ReflectValue) {
			return // nothing to write: leave the statement alone
		}
		if p.policy == TxRequire {
			db.AddError(fmt.Errorf("gormoutbox: %w: %s of %s has outbox events to write; run it in db.Transaction, "+
				"keep GORM's default transaction (SkipDefaultTransaction off), or set Config.TxPolicy to TxBegin",
				ErrNoTransaction, o, info.aggregateType))
			return
		}
		pool := stmt.ConnPool
		tx := db.Begin()
		if tx.Error != nil {
			db.AddError(fmt.Errorf("gormoutbox: begin transaction: %w", tx.Error))
			return
		}
		stmt.ConnPool = tx.Statement.ConnPool
		db.InstanceSet(startedKey, pool)
	}
}

// write runs after the model's After hooks, before GORM commits. It writes
// the statement's events in one insert on the statement's transaction and
// empties the recorders; a failure is added to db.Error, so GORM (or the
// caller's db.Transaction) rolls the model write back.
func (p *Plugin) write(o op) func(*gorm.DB) {
	return func(db *gorm.DB) {
		if p.policy == TxBegin {
			defer p.finish(db)
		}
		stmt := db.Statement
		if db.DryRun || stmt.Schema == nil {
			return
		}
		info := infoOf(stmt.Schema)
		if !info.records && !info.changes {
			return
		}
		if db.Error != nil {
			// The save failed: its events must not ride along with a
			// later, unrelated save of the same model.
			if info.records {
				discardAll(stmt.ReflectValue)
			}
			return
		}
		if db.RowsAffected == 0 {
			// Nothing changed, so nothing happened to announce. Save of a
			// missing key lands here first, then writes on its create.
			return
		}
		events, err := p.collect(db, o, info)
		if err != nil {
			db.AddError(err)
			return
		}
		if len(events) == 0 {
			return
		}
		if !inTransaction(db) {
			// Unreachable while ensure is registered; kept so an outbox
			// row can never commit on its own.
			db.AddError(fmt.Errorf("gormoutbox: %w: %s of %s", ErrNoTransaction, o, info.aggregateType))
			return
		}
		w, err := p.writer(db)
		if err != nil {
			db.AddError(err)
			return
		}
		if err := w.Write(stmt.Context, stmt.ConnPool, events...); err != nil {
			db.AddError(fmt.Errorf("gormoutbox: %s of %s: write %d outbox events: %w", o, info.aggregateType, len(events), err))
		}
	}
}

// finish ends a transaction the plugin opened: commit if the statement and
// the outbox insert succeeded, roll back otherwise.
func (p *Plugin) finish(db *gorm.DB) {
	v, ok := db.InstanceGet(startedKey)
	if !ok {
		return
	}
	tx, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	if ok {
		if db.Error != nil {
			if err := tx.Rollback(); err != nil && !errors.Is(err, gorm.ErrInvalidTransaction) {
				db.Logger.Error(db.Statement.Context, "gormoutbox: rollback: %v", err)
			}
		} else if err := tx.Commit(); err != nil {
			db.AddError(fmt.Errorf("gormoutbox: commit: %w", err))
		}
	}
	db.Statement.ConnPool = v.(gorm.ConnPool)
}

// collect empties the recorders of the statement's models and returns their
// events, with a change event first for models that opted in, and the
// fields left to the write filled from the model.
func (p *Plugin) collect(db *gorm.DB, o op, info *modelInfo) ([]txoutbox.Event, error) {
	stmt := db.Statement
	var (
		events   []txoutbox.Event
		firstErr error
	)
	eachModel(stmt.ReflectValue, func(m reflect.Value) {
		ptr := m.Addr().Interface()
		var pending []recorded
		if info.records {
			if r, ok := ptr.(recorder); ok {
				pending = r.outboxEvents().take()
			}
		}
		if !info.changes && len(pending) == 0 {
			return
		}
		if firstErr != nil {
			return // keep emptying the other recorders; the save fails anyway
		}
		key := primaryKey(stmt.Context, stmt.Schema, m)
		topic := p.defaultTopic
		if t, ok := ptr.(Topicer); ok {
			if mt := t.OutboxTopic(); mt != "" {
				topic = mt
			}
		}
		aggType := info.aggregateType
		if t, ok := ptr.(AggregateTyper); ok {
			aggType = t.OutboxAggregateType()
		}
		if info.changes {
			if key == "" {
				firstErr = fmt.Errorf("%w: %s of %s: a row has no primary key value", ErrNoRowData, o, info.aggregateType)
				return
			}
			ev, err := txoutbox.NewEvent(topic, aggType, key, aggType+o.changeSuffix(), ptr)
			if err != nil {
				firstErr = fmt.Errorf("gormoutbox: %s of %s: %w", o, info.aggregateType, err)
				return
			}
			events = append(events, ev)
		}
		for _, r := range pending {
			if r.err != nil {
				firstErr = r.err
				return
			}
			ev := r.event
			if ev.Topic == "" {
				ev.Topic = topic
			}
			if ev.AggregateType == "" {
				ev.AggregateType = aggType
			}
			if ev.AggregateID == "" {
				ev.AggregateID = key
			}
			events = append(events, ev)
		}
	})
	return events, firstErr
}
