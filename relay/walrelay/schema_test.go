package walrelay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// A WAL relay refuses a table older than this release's schema (naming
// outbox migrate up) or with a version it does not know (naming it),
// before it creates a publication or a slot.
func TestRunRefusesASchemaItDoesNotMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, b *bundle)
		want    error
		mention string
	}{
		{"older", func(t *testing.T, b *bundle) { testkit.RevertOutboxTo(t, b.db.SQL, b.db.Table(), 8) },
			migrations.ErrSchemaTooOld, "run outbox migrate up"},
		{"newer", func(t *testing.T, b *bundle) {
			testkit.RecordOutboxVersion(t, b.db.SQL, b.db.Table(), 99, "next")
		}, migrations.ErrSchemaTooNew, "version 99"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			c.prepare(t, b)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := b.newRelay(t, b.config()).Run(ctx)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("Run = %v; want %v mentioning %q", err, c.want, c.mention)
			}
			var slots, pubs int
			if err := b.db.SQL.QueryRow(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, b.defaultName()).Scan(&slots); err != nil {
				t.Fatal(err)
			}
			if err := b.db.SQL.QueryRow(`SELECT count(*) FROM pg_publication WHERE pubname = $1`, b.defaultName()).Scan(&pubs); err != nil {
				t.Fatal(err)
			}
			if slots != 0 || pubs != 0 {
				t.Errorf("%d slots and %d publications made", slots, pubs)
			}
		})
	}
}
