package largepayloads

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/inbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
)

// With package inbox, the claim check's middleware goes first: the
// handler gets the payload inside the inbox's transaction, a redelivered
// reference is skipped, and a reference whose object is gone fails the
// message before the inbox records it, so it is processed once the
// object is back (or sent to a poison queue).
func TestMiddlewareBeforeTheInbox(t *testing.T) {
	t.Parallel()
	db := testkit.NewDB(t)
	ctx := context.Background()
	table := txoutbox.Table{Schema: db.Schema}
	m, err := migrations.New(db.SQL, migrations.Config{Set: migrations.Inbox, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	inboxMW, err := ib.Middleware(inbox.MiddlewareConfig{Consumer: "archive", DB: db.SQL})
	if err != nil {
		t.Fatal(err)
	}
	store, dir := fileStore(t)
	var handled [][]byte
	h := claimcheck.Middleware(store)(inboxMW(func(msg *message.Message) ([]*message.Message, error) {
		if _, ok := inbox.TxFromContext(msg.Context()); !ok {
			t.Error("the handler runs outside the inbox's transaction")
		}
		handled = append(handled, msg.Payload)
		return nil, nil
	}))

	e, err := txoutbox.NewEvent("docs", "doc", "d-1", "doc.stored", map[string]string{"body": string(bytes.Repeat([]byte("q"), 100<<10))})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := store.Offload(ctx, table, relay.Message(e))
	if err != nil {
		t.Fatal(err)
	}
	delivery := func() *message.Message { // what the broker hands each time
		m := message.NewMessage(ref.UUID, bytes.Clone(ref.Payload))
		for k, v := range ref.Metadata {
			m.Metadata.Set(k, v)
		}
		return m
	}

	path := filepath.Join(dir, filepath.FromSlash(ref.Metadata.Get(claimcheck.HeaderKey)))
	saved, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := h(delivery()); !errors.Is(err, claimcheck.ErrObjectMissing) {
		t.Fatalf("object gone: %v, want ErrObjectMissing", err)
	}
	if err := os.WriteFile(path, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 { // delivered, then redelivered
		if _, err := h(delivery()); err != nil {
			t.Fatal(err)
		}
	}
	if len(handled) != 1 || !bytes.Equal(handled[0], e.Payload) {
		t.Fatalf("handled %d times, want once, with the payload", len(handled))
	}
}
