package outboxadmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// Every method refuses a table older than version 8 (naming outbox
// migrate up) or with a version this release does not know (naming it),
// before it reads or changes anything; once migrated, the same Admin
// works.
func TestAdminRefusesASchemaItDoesNotMatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	since := outboxadmin.ReplayFilter{Since: time.Now().Add(-time.Hour)}
	calls := map[string]func(*outboxadmin.Admin) error{
		"Status":   func(a *outboxadmin.Admin) error { _, err := a.Status(ctx); return err },
		"ListDead": func(a *outboxadmin.Admin) error { _, err := a.ListDead(ctx, outboxadmin.Filter{}, 0, 0); return err },
		"Retry": func(a *outboxadmin.Admin) error {
			_, err := a.Retry(ctx, outboxadmin.Filter{All: true}, false)
			return err
		},
		"Replay": func(a *outboxadmin.Admin) error { _, err := a.Replay(ctx, since, true); return err },
		"Event":  func(a *outboxadmin.Admin) error { _, err := a.Event(ctx, 1); return err },
	}
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, db *testkit.DB)
		want    error
		mention string
	}{
		{"older", func(t *testing.T, db *testkit.DB) { testkit.RevertOutboxTo(t, db.SQL, db.Table(), 7) }, migrations.ErrSchemaTooOld, "run outbox migrate up"},
		{"newer", func(t *testing.T, db *testkit.DB) { testkit.RecordOutboxVersion(t, db.SQL, db.Table(), 99, "next") }, migrations.ErrSchemaTooNew, "version 99"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			db, adm, _ := setup(t, outboxadmin.Config{})
			c.prepare(t, db)
			for name, call := range calls {
				if err := call(adm); !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) {
					t.Errorf("%s = %v; want %v mentioning %q", name, err, c.want, c.mention)
				}
			}
		})
	}
	// At version 8, what it needs, it works.
	db, adm, _ := setup(t, outboxadmin.Config{})
	testkit.RevertOutboxTo(t, db.SQL, db.Table(), 8)
	if err := adm.CheckSchema(ctx); err != nil {
		t.Errorf("CheckSchema at version 8: %v", err)
	}
	if _, err := adm.Status(ctx); err != nil {
		t.Errorf("Status at version 8: %v", err)
	}
}
