package inboxe2e

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox/inbox"
)

// ledgerHandler applies the effect of an account event on the
// middleware's transaction and counts its runs.
func ledgerHandler(t *testing.T, consumer string, runs *int, fail error) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		*runs++
		tx, ok := inbox.TxFromContext(msg.Context())
		if !ok {
			t.Error("the handler got no transaction")
			return nil, errors.New("no transaction")
		}
		id, _ := uuid.Parse(msg.Metadata.Get("event_id"))
		if err := effect(msg.Context(), tx, consumer, id, string(msg.Payload), 1); err != nil {
			return nil, err
		}
		return nil, fail
	}
}

func newMessage(eventID string) *message.Message {
	msg := message.NewMessage(uuid.NewString(), []byte("acct-1"))
	if eventID != "" {
		msg.Metadata.Set("event_id", eventID)
	}
	return msg
}

func TestMiddlewareProcessesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mw, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: "billing", DB: b.db.SQL})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.Must(uuid.NewV7())
	boom := errors.New("boom")
	runs := 0
	if _, err := mw(ledgerHandler(t, "billing", &runs, boom))(newMessage(id.String())); err != boom {
		t.Fatalf("failing handler: middleware returned %v, want the handler's error", err)
	}
	h := mw(ledgerHandler(t, "billing", &runs, nil))
	for i := range 3 {
		msg := newMessage(strings.ToUpper(id.String())) // the same event, spelled differently
		ctx := context.WithValue(context.Background(), originalKey{}, "original")
		msg.SetContext(ctx)
		if _, err := h(msg); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
		if msg.Context() != ctx {
			t.Fatal("the message kept the handler's transaction context after the handler returned")
		}
	}
	if runs != 2 {
		t.Fatalf("handler runs = %d, want 2 (the failure and one redelivery)", runs)
	}
	if got := effectsOf(t, b.db.SQL, "billing"); got[id] != 1 || len(got) != 1 {
		t.Fatalf("effects = %v, want exactly one", got)
	}
}

func TestMiddlewareInvalidIDs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	msgNoID := newMessage("")
	msgNoID.UUID = "m-1"
	msgBadID := newMessage("order-42")
	msgBadID.UUID = "m-2"
	msgNilID := newMessage(uuid.Nil.String())
	msgNilID.UUID = "m-3"

	t.Run("nack by default", func(t *testing.T) {
		mw, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: "nack", DB: b.db.SQL})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		h := mw(ledgerHandler(t, "nack", &runs, nil))
		for _, c := range []struct {
			msg  *message.Message
			want error
			text string
		}{
			{msgNoID, inbox.ErrNoEventID, `inbox: message has no event id: message m-1 has no "event_id" metadata`},
			{msgBadID, inbox.ErrInvalidEventID, `inbox: invalid event id: message m-2: metadata event_id "order-42" is not a UUID`},
			{msgNilID, inbox.ErrInvalidEventID, `inbox: invalid event id: message m-3: metadata event_id is the nil UUID`},
		} {
			if _, err := h(c.msg); !errors.Is(err, c.want) || err.Error() != c.text {
				t.Errorf("message %s: %v\nwant %s", c.msg.UUID, err, c.text)
			}
		}
		if runs != 0 {
			t.Errorf("handler ran %d times for messages without an id", runs)
		}
	})

	t.Run("drop", func(t *testing.T) {
		var logs bytes.Buffer
		mw, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: "drop", DB: b.db.SQL, OnInvalidID: inbox.DropInvalidID,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		if _, err := mw(ledgerHandler(t, "drop", &runs, nil))(msgNoID); err != nil || runs != 0 {
			t.Fatalf("dropped message: err %v, handler runs %d", err, runs)
		}
		if !strings.Contains(logs.String(), "level=WARN msg=\"inbox: dropped a message without a usable event id\" consumer=drop message_uuid=m-1") {
			t.Fatalf("log = %q", logs.String())
		}
	})

	t.Run("handle without the inbox", func(t *testing.T) {
		mw, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: "handle", DB: b.db.SQL, OnInvalidID: inbox.HandleInvalidID})
		if err != nil {
			t.Fatal(err)
		}
		runs := 0
		h := mw(ledgerHandler(t, "handle", &runs, nil))
		for range 2 {
			if _, err := h(msgBadID); err != nil {
				t.Fatal(err)
			}
		}
		if runs != 2 || count(t, b.db.SQL, `SELECT count(*) FROM ledger WHERE consumer = 'handle'`) != 2 {
			t.Fatalf("handler runs %d; want 2, each committed, at-least-once", runs)
		}
		if n := count(t, b.db.SQL, `SELECT count(*) FROM inbox WHERE consumer = 'handle'`); n != 0 {
			t.Fatalf("%d inbox rows for messages without an id", n)
		}
	})
}

func TestMiddlewareEventIDSource(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := uuid.Must(uuid.NewV7())
	runs := 0
	handler := func(msg *message.Message) ([]*message.Message, error) { runs++; return nil, nil }

	custom, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: "custom", DB: b.db.SQL, EventIDKey: "ce_id"})
	if err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage("m", nil)
	msg.Metadata.Set("ce_id", id.String())
	for range 2 {
		if _, err := custom(handler)(msg); err != nil {
			t.Fatal(err)
		}
	}

	fallback, err := b.ib.Middleware(inbox.MiddlewareConfig{Consumer: "fallback", DB: b.db.SQL, FallbackToUUID: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := fallback(handler)(message.NewMessage(id.String(), nil)); err != nil {
			t.Fatal(err)
		}
	}
	if runs != 2 {
		t.Fatalf("handler runs = %d, want one per consumer", runs)
	}
	if got, err := inbox.MessageEventID(msg, "ce_id"); got != id || err != nil {
		t.Fatalf("MessageEventID = %v, %v", got, err)
	}
	if _, err := inbox.MessageEventID(msg, ""); !errors.Is(err, inbox.ErrNoEventID) {
		t.Fatalf("MessageEventID without event_id = %v", err)
	}
}

func TestMiddlewareConfig(t *testing.T) {
	t.Parallel()
	ib, err := inbox.New(inbox.Config{})
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", "postgres://unused") // never connected
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []struct {
		cfg  inbox.MiddlewareConfig
		text string
	}{
		{inbox.MiddlewareConfig{}, "inbox: middleware: inbox: invalid consumer name: MiddlewareConfig.Consumer is empty"},
		{inbox.MiddlewareConfig{Consumer: "c"}, "inbox: middleware: MiddlewareConfig.DB is nil"},
		{inbox.MiddlewareConfig{Consumer: "c", DB: db, OnInvalidID: 7},
			"inbox: middleware: MiddlewareConfig.OnInvalidID is InvalidIDAction(7), not one of the defined actions"},
	} {
		if _, err := ib.Middleware(c.cfg); err == nil || err.Error() != c.text {
			t.Errorf("Middleware(%+v) = %v, want %s", c.cfg, err, c.text)
		}
	}
}

// originalKey marks the context a message arrived with.
type originalKey struct{}
