package outboxadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// Locks names the session that holds a companion of the outbox locked,
// and the one queued behind it, while a statement that waits
// for them gives up with an error IsLockTimeout recognises.
func TestLocksNameTheSessionsInTheRelaysWay(t *testing.T) {
	t.Parallel()
	db, adm, _ := setup(t, outboxadmin.Config{})
	ctx := context.Background()
	if locks, err := adm.Locks(ctx); err != nil || len(locks) != 0 {
		t.Fatalf("Locks of an unlocked outbox = %v, %v; want none", locks, err)
	}
	holder, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback() //nolint:errcheck // the lock is all it does
	if _, err := holder.Exec(`LOCK TABLE outbox_shards IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := holder.QueryRow(`SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// A DDL statement queued behind the holder's lock: the relays queue
	// behind it too.
	queued := make(chan error, 1)
	go func() {
		_, err := db.SQL.ExecContext(ctx, `ALTER TABLE outbox_shards ADD COLUMN IF NOT EXISTS note text`)
		queued <- err
	}()
	testkit.WaitFor(t, 10*time.Second, "the ALTER TABLE queued behind the lock", func() bool {
		locks, err := adm.Locks(ctx)
		return err == nil && len(locks) == 2
	})
	locks, err := adm.Locks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := db.Schema + ".outbox_shards"
	if l := locks[0]; l.PID != pid || !l.Granted || l.Mode != "ShareLock" || l.Relation != want || l.State != "idle in transaction" {
		t.Errorf("first lock = %+v, want pid %d holding ShareLock on %s", l, pid, want)
	}
	if l := locks[1]; l.Granted || l.Mode != "AccessExclusiveLock" || l.Relation != want {
		t.Errorf("second lock = %+v, want AccessExclusiveLock on %s waited for", l, want)
	}

	tx, err := db.SQL.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	if _, err := tx.Exec(`SET LOCAL lock_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`UPDATE outbox_shards SET owner = NULL WHERE shard = 0`); !outboxadmin.IsLockTimeout(err) {
		t.Errorf("an update waiting on the lock = %v, want a lock timeout", err)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatal(err)
	}
}
