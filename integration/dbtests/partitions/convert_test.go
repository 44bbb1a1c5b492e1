package partitions_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// afterCheck is a DB that runs its hooks in turn, one as each transaction
// begins once the conversion's check on the ids is validated: the swap's
// attempts, then what follows them.
type afterCheck struct {
	*sql.DB
	hooks []func()
}

func (d *afterCheck) BeginTx(ctx context.Context, opts *sql.TxOptions) (*sql.Tx, error) {
	var validated bool
	if err := d.DB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_constraint
		WHERE conname = 'outbox_partition_check' AND convalidated AND conrelid = to_regclass('outbox'))`).Scan(&validated); err != nil {
		return nil, err
	}
	if validated && len(d.hooks) > 0 {
		d.hooks[0]()
		d.hooks = d.hooks[1:]
	}
	return d.DB.BeginTx(ctx, opts)
}

// A conversion that fails after adding its check on the ids (here, behind
// a long transaction) takes the check away again: left on the table, it
// would fail every writer once the ids reach the first partition's end,
// hours after the command failed.
func TestFailedConversionLeavesNoCheck(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	exec := func(q string) {
		t.Helper()
		if _, err := db.SQL.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	insert := `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 't', 'a', 'e', '\x00')`
	exec(insert)
	n, err := outboxsql.NamesFor(db.Schema, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	long, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback() //nolint:errcheck // rolled back below
	// A long transaction holds the table through the swap's attempts,
	// then ends.
	d := &afterCheck{DB: db.SQL, hooks: []func(){
		func() {
			if _, err := long.ExecContext(ctx, `SELECT count(*) FROM outbox`); err != nil {
				t.Error(err)
			}
		},
		func() {},
		func() {
			if err := long.Rollback(); err != nil {
				t.Error(err)
			}
		},
	}}
	err = partitions.Convert(ctx, d, partitions.Table{Names: n, Schema: db.Schema, Name: "outbox"}, 100,
		partitions.Timeouts{Lock: 100 * time.Millisecond, Statement: 10 * time.Second}, 2)
	if err == nil {
		t.Fatal("converted behind a long transaction")
	}
	// The writers go on, past the end the conversion had chosen (200).
	exec(`SELECT setval(pg_get_serial_sequence('outbox', 'id'), 500)`)
	exec(insert)
}

// The state's highest id counts the ids handed out to rows not committed
// (here, rolled back): partitions made ahead start past them, so none is
// attached over a row its writer is routing to the default partition.
func TestStateCountsIDsHandedOut(t *testing.T) {
	t.Parallel()
	db := testkit.NewOutbox(t)
	ctx := context.Background()
	n, err := outboxsql.NamesFor(db.Schema, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	insert := `INSERT INTO outbox (event_id, topic, aggregate_id, event_type, payload) VALUES (gen_random_uuid(), 't', 'a', 'e', '\x00') RETURNING id`
	var committed, handedOut int64
	if err := db.SQL.QueryRowContext(ctx, insert).Scan(&committed); err != nil {
		t.Fatal(err)
	}
	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := tx.QueryRowContext(ctx, insert).Scan(&handedOut); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	st, err := partitions.ReadState(ctx, db.SQL, n)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Owner || st.MaxID != handedOut || handedOut <= committed {
		t.Fatalf("state: owner %v, MaxID %d; want the last id handed out, %d (the highest written is %d)", st.Owner, st.MaxID, handedOut, committed)
	}
}
