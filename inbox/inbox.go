package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// TableNameDefault is the inbox table's name when Config.Table.Name is
// empty. It is also the base name of the migrations.Inbox set.
const TableNameDefault = "inbox"

// PruneBatchDefault is how many rows one Prune statement deletes by default:
// small enough that each statement holds its locks briefly and produces
// little WAL at once, large enough that a backlog drains in few round trips.
const PruneBatchDefault = 1000

var (
	// ErrNoEventID is returned (wrapped) for a message that carries no
	// event id.
	ErrNoEventID = errors.New("inbox: message has no event id")

	// ErrInvalidEventID is returned (wrapped) for an event id that is not a
	// UUID, or is the nil UUID, which no event has.
	ErrInvalidEventID = errors.New("inbox: invalid event id")

	// ErrInvalidConsumer is returned (wrapped) for an empty consumer name.
	ErrInvalidConsumer = errors.New("inbox: invalid consumer name")

	// ErrNotInTransaction is returned (wrapped) when the connection passed
	// to Claim or Process is not a transaction, such as a *sql.DB or a
	// *gorm.DB outside Transaction: an inbox row that commits on its own
	// would mark the event processed even if the business change failed.
	// It is txoutbox.ErrNoTransaction.
	ErrNotInTransaction = txoutbox.ErrNoTransaction
)

// Config configures an Inbox. The zero value is valid.
type Config struct {
	// Table is the inbox table created by migrations.Inbox with the same
	// Table. Default: "inbox" on the search_path. Note that the default
	// name differs from txoutbox.Table's ("outbox").
	Table txoutbox.Table

	// Dialect is the database the inbox table lives in. Default:
	// PostgreSQL. txoutbox.DialectOf tells it from a *sql.DB. On MySQL a
	// consumer name is at most 255 bytes.
	Dialect txoutbox.Dialect

	// PruneBatch is the most rows one Prune statement deletes. Default:
	// PruneBatchDefault.
	PruneBatch int

	// TxOptions are the options of the transactions Run and the Watermill
	// middleware begin. Default: nil, the server's default isolation (READ
	// COMMITTED). Under REPEATABLE READ or SERIALIZABLE a concurrent
	// duplicate fails with a serialization error instead of being skipped;
	// the message is then redelivered and skipped, so both are correct.
	TxOptions *sql.TxOptions
}

// Inbox records which events each consumer has processed, in the consumer's
// own transaction, so that a redelivered event is skipped. It is safe for
// concurrent use; build one per inbox table and share it.
type Inbox struct {
	table      string // quoted, for messages
	claim      string
	prune      string
	pruneBatch int
	txOptions  *sql.TxOptions
	mysql      bool
}

// New validates cfg and returns an Inbox.
func New(cfg Config) (*Inbox, error) {
	if cfg.Table.Name == "" {
		cfg.Table.Name = TableNameDefault
	}
	mysql := false
	switch cfg.Dialect {
	case 0, txoutbox.PostgreSQL:
	case txoutbox.MySQL:
		mysql = true
	default:
		return nil, fmt.Errorf("inbox: Config.Dialect: %w: %d", txoutbox.ErrInvalidDialect, uint8(cfg.Dialect))
	}
	if mysql {
		names, err := outboxsql.MySQLNamesFor(cfg.Table.Schema, cfg.Table.Name)
		if err != nil {
			return nil, fmt.Errorf("inbox: %w", err)
		}
		if cfg.PruneBatch < 0 {
			return nil, fmt.Errorf("inbox: Config.PruneBatch is negative (%d)", cfg.PruneBatch)
		}
		return &Inbox{
			table:      names.Table,
			claim:      names.Render(outboxsql.MySQLInboxClaim),
			prune:      names.Render(outboxsql.MySQLInboxPrune),
			pruneBatch: cmp.Or(cfg.PruneBatch, PruneBatchDefault),
			txOptions:  cfg.TxOptions,
			mysql:      true,
		}, nil
	}
	names, err := outboxsql.NamesFor(cfg.Table.Schema, cfg.Table.Name)
	if err != nil {
		return nil, fmt.Errorf("inbox: %w", err)
	}
	if cfg.PruneBatch < 0 {
		return nil, fmt.Errorf("inbox: Config.PruneBatch is negative (%d)", cfg.PruneBatch)
	}
	if cfg.PruneBatch == 0 {
		cfg.PruneBatch = PruneBatchDefault
	}
	return &Inbox{
		table:      names.Table,
		claim:      names.Render(outboxsql.InboxClaim),
		prune:      names.Render(outboxsql.InboxPrune),
		pruneBatch: cfg.PruneBatch,
		txOptions:  cfg.TxOptions,
	}, nil
}

// Claim records on tx that consumer processed the event, and reports
// whether this is the event's first delivery to consumer. When first is
// false the event was processed before (or by a concurrent transaction that
// committed meanwhile) and the caller must skip it.
//
// tx must be the transaction that holds the consumer's business writes, so
// that the record commits or rolls back with them: a *sql.Tx, gormoutbox.Execer(tx) for
// GORM, Pgx(tx) for pgx, or ent's generated *ent.Tx built with the
// sql/execquery feature. A *sql.DB is refused with ErrNotInTransaction.
//
// If another transaction has claimed the same event and not finished, Claim
// waits for it: it then returns false if that transaction committed, and
// true if it rolled back. So concurrent duplicates are handled once.
func (ib *Inbox) Claim(ctx context.Context, tx txoutbox.SQLExecer, consumer string, eventID uuid.UUID) (first bool, err error) {
	if err := ib.checkArgs(consumer, eventID); err != nil {
		return false, err
	}
	if tx == nil {
		return false, fmt.Errorf("inbox: %w: Claim got a nil transaction", ErrNotInTransaction)
	}
	if _, ok := tx.(*sql.DB); ok {
		return false, fmt.Errorf("inbox: %w: Claim got a *sql.DB; pass the *sql.Tx of the business change", ErrNotInTransaction)
	}
	res, err := tx.ExecContext(ctx, ib.claim, consumer, eventID.String())
	if err != nil {
		return false, fmt.Errorf("inbox: claim event %s for consumer %q in %s: %w", eventID, consumer, ib.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("inbox: claim event %s for consumer %q: rows affected: %w", eventID, consumer, err)
	}
	return n == 1, nil
}

// Process claims the event on tx and, on its first delivery to consumer,
// runs fn, which makes the business change on the same tx. It reports
// whether fn ran and succeeded; a redelivery returns false, nil without
// running fn.
//
// If fn fails, Process returns its error unchanged and the caller must roll
// tx back: that removes the inbox row with fn's writes, so the event is
// processed again when it is redelivered. Committing after an error would
// mark the event processed with its effect missing.
func (ib *Inbox) Process(ctx context.Context, tx txoutbox.SQLExecer, consumer string, eventID uuid.UUID, fn func() error) (processed bool, err error) {
	first, err := ib.Claim(ctx, tx, consumer, eventID)
	if err != nil || !first {
		return false, err
	}
	if err := fn(); err != nil {
		return false, err
	}
	return true, nil
}

// Beginner begins database/sql transactions: *sql.DB and *sql.Conn.
type Beginner interface {
	BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error)
}

// Run processes one delivery in a transaction of its own: it begins a
// transaction on db, claims the event, runs fn on the first delivery and
// commits. A redelivery rolls back without running fn and returns false,
// nil. If fn fails, Run rolls back and returns fn's error unchanged, so the
// event is processed again when redelivered.
//
// A failed commit returns an error, and the outcome is unknown to Run: the
// caller should let the message be redelivered, and the inbox then decides.
func (ib *Inbox) Run(ctx context.Context, db Beginner, consumer string, eventID uuid.UUID, fn func(tx *sql.Tx) error) (processed bool, err error) {
	return ib.run(ctx, db, consumer, eventID, true, fn)
}

// run is Run, with the claim optional for the middleware's messages that
// have no event id and are handled anyway.
func (ib *Inbox) run(ctx context.Context, db Beginner, consumer string, eventID uuid.UUID, claim bool, fn func(tx *sql.Tx) error) (processed bool, err error) {
	if claim {
		// Checked before BeginTx so bad input costs no round trip.
		if err := ib.checkArgs(consumer, eventID); err != nil {
			return false, err
		}
	}
	if db == nil {
		return false, errors.New("inbox: run: the database is nil")
	}
	tx, err := db.BeginTx(ctx, ib.txOptions)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	// Rolls back on every path but a successful commit, including a panic
	// in fn; after Commit it is a no-op.
	defer func() { _ = tx.Rollback() }()
	if claim {
		first, err := ib.Claim(ctx, tx, consumer, eventID)
		if err != nil || !first {
			return false, err
		}
	}
	if err := fn(tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit event %s for consumer %q: %w", eventID, consumer, err)
	}
	return true, nil
}

func (ib *Inbox) checkArgs(consumer string, eventID uuid.UUID) error {
	if consumer == "" {
		return fmt.Errorf("%w: empty", ErrInvalidConsumer)
	}
	if ib.mysql && len(consumer) > outboxsql.MySQLInboxConsumerMaxBytes {
		// INSERT IGNORE would cut it to fit, and two consumers would share
		// their records.
		return fmt.Errorf("%w: %d bytes is longer than the MySQL inbox table's %d", ErrInvalidConsumer,
			len(consumer), outboxsql.MySQLInboxConsumerMaxBytes)
	}
	if eventID == uuid.Nil {
		return fmt.Errorf("%w: the nil UUID", ErrInvalidEventID)
	}
	return nil
}
