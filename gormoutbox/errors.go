package gormoutbox

import (
	"errors"

	"github.com/txoutbox/txoutbox"
)

var (
	// ErrNoTransaction is returned (from db.Create, Save, Updates, Delete
	// and Emit) when outbox events would be written by a statement that is
	// not inside a transaction, for example under SkipDefaultTransaction.
	// With the default TxRequire policy the statement is refused before
	// any SQL runs; set Config.TxPolicy to TxBegin to have the plugin open
	// a transaction instead. Emit always refuses. It is
	// txoutbox.ErrNoTransaction.
	ErrNoTransaction = txoutbox.ErrNoTransaction

	// ErrNoRowData is returned when a bulk update or delete of a model
	// that opted in to change events (ChangeEventer) carries no per-row
	// data, e.g. db.Where(...).Delete(&Order{}). Add
	// Clauses(clause.Returning{}) with a slice target to get one change
	// event per affected row, write the events yourself with Emit, or run
	// the statement without a model (db.Table("orders")). The statement is
	// refused before any SQL runs.
	ErrNoRowData = errors.New("gormoutbox: bulk statement has no per-row data for change events")

	// ErrNotRegistered is returned by Emit when the plugin was not
	// registered on the *gorm.DB with db.Use.
	ErrNotRegistered = errors.New("gormoutbox: plugin not registered on this *gorm.DB (call db.Use)")
)
