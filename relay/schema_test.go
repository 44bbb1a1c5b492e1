package relay

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// A relay refuses a table older than this release's schema (naming outbox
// migrate up) or with a version it does not know (naming it), before it
// registers or claims anything.
func TestRunRefusesASchemaItDoesNotMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		prepare func(t *testing.T, b *internalBundle)
		want    error
		mention string
	}{
		{"older", func(t *testing.T, b *internalBundle) { testkit.RevertOutboxTo(t, b.db.SQL, b.db.Table(), 8) },
			migrations.ErrSchemaTooOld, "run outbox migrate up"},
		{"newer", func(t *testing.T, b *internalBundle) {
			testkit.RecordOutboxVersion(t, b.db.SQL, b.db.Table(), 99, "next")
		},
			migrations.ErrSchemaTooNew, "version 99"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setupInternal(t)
			b.write(t, 1, "k")
			c.prepare(t, b)
			pub := newOutagePublisher(nil)
			r := b.newRelayWith(t, pub, fastConfig(b))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := r.Run(ctx)
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("Run = %v; want %v mentioning %q", err, c.want, c.mention)
			}
			if n := b.count(t, `SELECT count(*) FROM outbox_relays`); n != 0 {
				t.Errorf("%d relays registered", n)
			}
			if n := b.count(t, `SELECT count(*) FROM outbox WHERE state <> 'pending'`); n != 0 {
				t.Errorf("%d rows claimed or published", n)
			}
		})
	}
}

// A group leaves a table whose schema is older than this release's alone,
// saying why, serves the others, and serves it once it is migrated.
func TestGroupSkipsATableOfAnOlderSchema(t *testing.T) {
	f := newFleet(t)
	f.add(t, "a", true)
	b := f.add(t, "b", true)
	testkit.RevertOutboxTo(t, b.SQL, b.Table(), 8)
	logs := newLogRecorder()
	cfg := f.groupConfig(false)
	cfg.Relay.Logger = slog.New(logs)
	g := f.newGroup(t, newGroupPublisher(0, 0), cfg)
	testkit.Run(t, g.Run)
	f.waitServing(t, g, "a")
	testkit.WaitFor(t, 10*time.Second, "b skipped for its schema", func() bool {
		return logs.countContaining(slog.LevelWarn, "not serving a selected schema's table", "outbox migrate up") == 1
	})
	if n := f.count(t, "b", "true"); n != 0 {
		t.Fatalf("b has %d rows", n)
	}
	m, err := migrations.New(b.SQL, migrations.Config{Table: b.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.waitServing(t, g, "a", "b")
}

// countContaining is how many records at level have a message containing
// msg and an attribute whose value contains value.
func (l logRecorder) countContaining(level slog.Level, msg, value string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range *l.recs {
		if r.Level != level || !strings.Contains(r.Message, msg) {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if strings.Contains(a.Value.String(), value) {
				n++
				return false
			}
			return true
		})
	}
	return n
}
