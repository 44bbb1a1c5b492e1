package inboxe2e

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	entdialect "entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/inbox"
)

func openGorm(t *testing.T, url string, prepare bool) *gorm.DB {
	t.Helper()
	gdb, err := gorm.Open(postgres.Open(url), &gorm.Config{Logger: logger.Discard, PrepareStmt: prepare})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if sqlDB, err := gdb.DB(); err == nil {
			sqlDB.Close()
		}
	})
	return gdb
}

func TestGorm(t *testing.T) {
	t.Parallel()
	for _, prepare := range []bool{false, true} {
		name := "plain"
		if prepare {
			name = "PrepareStmt"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := context.Background()
			gdb := openGorm(t, b.db.URL, prepare).WithContext(ctx)
			id := uuid.Must(uuid.NewV7())
			checkRedeliveries(t, b, id, func(fail bool) (processed bool, err error) {
				err = gdb.Transaction(func(tx *gorm.DB) error {
					var err error
					ex, err := gormoutbox.Execer(tx)
					if err != nil {
						return err
					}
					processed, err = b.ib.Process(ctx, ex, "billing", id, func() error {
						if err := tx.Exec(`INSERT INTO ledger (consumer, event_id, account, amount) VALUES (?, ?, ?, ?)`,
							"billing", id.String(), "acct-1", 7).Error; err != nil {
							return err
						}
						if fail {
							return errBoom
						}
						return nil
					})
					return err
				})
				return processed, err
			})

			// Outside a transaction the row would commit on its own: refused.
			other := uuid.Must(uuid.NewV7())
			pool := "*sql.DB"
			if prepare {
				pool = "*gorm.PreparedStmtDB"
			}
			want := "gormoutbox: txoutbox: not in a transaction: the *gorm.DB's connection is a " + pool + "; call inside db.Transaction or on db.Begin()"
			_, err := gormoutbox.Execer(gdb)
			if !errors.Is(err, inbox.ErrNotInTransaction) || !errors.Is(err, gormoutbox.ErrNoTransaction) || err.Error() != want {
				t.Fatalf("Execer outside a transaction = %v\nwant %s", err, want)
			}
			if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox WHERE event_id = $1`, other.String()); n != 0 {
				t.Fatalf("%d inbox rows written outside a transaction", n)
			}
		})
	}
}

func TestGormRefusesBrokenSession(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gdb := openGorm(t, b.db.URL, false)
	tx := gdb.Begin()
	defer tx.Rollback()
	broken := errors.New("earlier failure")
	_ = tx.AddError(broken)
	if _, err := gormoutbox.Execer(tx); !errors.Is(err, broken) {
		t.Fatalf("Execer of a *gorm.DB carrying an error = %v, want that error", err)
	}
	if _, err := gormoutbox.Execer(nil); err == nil {
		t.Fatal("Execer of a nil *gorm.DB succeeded")
	}
}

// generatedTx has the ExecContext that ent generates on *ent.Tx with the
// sql/execquery feature: it forwards to the transaction's driver, which for
// the SQL dialect is ent's *sql.Tx.
type generatedTx struct{ driver entdialect.Tx }

func (tx *generatedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	ex, ok := tx.driver.(interface {
		ExecContext(context.Context, string, ...any) (sql.Result, error)
	})
	if !ok {
		return nil, errors.New("Tx.ExecContext is not supported")
	}
	return ex.ExecContext(ctx, query, args...)
}

func TestEnt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	drv := entsql.OpenDB(entdialect.Postgres, b.db.SQL)
	id := uuid.Must(uuid.NewV7())
	for i, want := range []bool{true, false} {
		dtx, err := drv.Tx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		processed, err := b.ib.Process(ctx, &generatedTx{dtx}, "billing", id, func() error {
			// The business write goes through ent's own builder and driver.
			q, args := entsql.Dialect(entdialect.Postgres).Insert("ledger").
				Columns("consumer", "event_id", "account", "amount").
				Values("billing", id.String(), "acct-1", 3).Query()
			return dtx.Exec(ctx, q, args, nil)
		})
		if processed != want || err != nil {
			t.Fatalf("delivery %d: Process = %v, %v; want %v", i+1, processed, err, want)
		}
		if err := dtx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// ent's SQL transaction is itself usable directly.
	dtx, err := drv.Tx(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer dtx.Rollback()
	entTx, ok := dtx.(txoutbox.SQLExecer)
	if !ok {
		t.Fatalf("ent's %T has no ExecContext", dtx)
	}
	if first, err := b.ib.Claim(ctx, entTx, "billing", id); first || err != nil {
		t.Fatalf("Claim of a processed event on ent's tx = %v, %v", first, err)
	}
	if got := effectsOf(t, b.db.SQL, "billing"); got[id] != 1 {
		t.Fatalf("effects = %v, want one", got)
	}
}

func TestPgx(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, b.db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id := uuid.Must(uuid.NewV7())
	for i, fail := range []bool{true, false, false} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		processed, err := b.ib.Process(ctx, inbox.Pgx(tx), "billing", id, func() error {
			return effectOrFail(ctx, inbox.Pgx(tx), "billing", id, "acct-1", 2, fail)
		})
		if err != nil {
			_ = tx.Rollback(ctx)
		} else if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		want := []bool{false, true, false}[i]
		if processed != want || (fail != errors.Is(err, errBoom)) {
			t.Fatalf("delivery %d: Process = %v, %v; want %v", i+1, processed, err, want)
		}
	}
	if got := effectsOf(t, b.db.SQL, "billing"); got[id] != 1 {
		t.Fatalf("effects = %v, want one", got)
	}
}
