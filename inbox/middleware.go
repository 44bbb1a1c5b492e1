package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"github.com/txoutbox/txoutbox"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
)

// EventIDKeyDefault is the message metadata key (a Kafka header, through
// watermill-kafka) that carries the event id. The txoutbox relay sets it.
const EventIDKeyDefault = txoutbox.HeaderEventID

// InvalidIDAction is what the middleware does with a message whose event id
// is missing or is not a UUID.
type InvalidIDAction int

const (
	// NackInvalidID returns an error matching ErrNoEventID or
	// ErrInvalidEventID from the handler, so the router nacks the message
	// (and a poison-queue middleware, if any, takes it). The default: a
	// message that cannot be deduplicated is not processed silently.
	NackInvalidID InvalidIDAction = iota

	// DropInvalidID acks the message without handling it and logs a
	// warning.
	DropInvalidID

	// HandleInvalidID handles the message in a transaction, as usual, but
	// without the inbox check: at-least-once for such messages. For topics
	// that mix outbox events with messages from other producers.
	HandleInvalidID
)

// String returns the constant's name.
func (a InvalidIDAction) String() string {
	switch a {
	case NackInvalidID:
		return "NackInvalidID"
	case DropInvalidID:
		return "DropInvalidID"
	case HandleInvalidID:
		return "HandleInvalidID"
	}
	return fmt.Sprintf("InvalidIDAction(%d)", int(a))
}

// MiddlewareConfig configures the Watermill middleware.
type MiddlewareConfig struct {
	// Consumer names the consuming component, e.g. "billing". Consumers
	// with different names process the same event independently. It must
	// stay the same across deploys: a renamed consumer processes every
	// redelivered event again. Required.
	Consumer string

	// DB begins the transaction each message is handled in (with
	// Config.TxOptions): a *sql.DB, or a *sql.Conn. Required.
	DB Beginner

	// EventIDKey is the metadata key holding the event id. Default:
	// EventIDKeyDefault.
	EventIDKey string

	// FallbackToUUID uses the Watermill message UUID as the event id when
	// the metadata key is absent. The relay sets both to the event id, but
	// other publishers usually give every publish attempt a fresh random
	// UUID, so a retried publish would not be recognised as a duplicate.
	// Enable it only when every producer on the topic keeps the UUID
	// stable per event. Default: false.
	FallbackToUUID bool

	// OnInvalidID decides the fate of a message without a usable event id.
	// Default: NackInvalidID.
	OnInvalidID InvalidIDAction

	// Logger receives a warning per dropped message and a debug line per
	// skipped duplicate. Default: slog.Default().
	Logger *slog.Logger
}

// Middleware returns a Watermill handler middleware that gives a router's
// handlers effectively-once processing:
//
//	mw, err := ib.Middleware(inbox.MiddlewareConfig{Consumer: "billing", DB: db})
//	router.AddMiddleware(mw)
//
// For each message it reads the event id, begins a transaction, claims the
// event and, on its first delivery, runs the handler with the transaction
// in the message's context (see TxFromContext); then it commits. The
// handler must make its database changes on that transaction. A redelivery
// is acked without running the handler. A handler error rolls everything
// back, the inbox row included, and is returned, so the router nacks and the
// event is processed again on redelivery.
//
// Add it after middleware that retries (router.AddMiddleware(retry.Middleware,
// mw)), so that each attempt runs in a fresh transaction: PostgreSQL
// refuses further statements in a transaction after one failed.
//
// Messages the handler returns are published by the router after the
// commit, so they are at-most-once: if publishing fails, the redelivery is
// a duplicate and skipped. Write follow-up events to the outbox on the
// handler's transaction instead (txoutbox.Writer.Write).
func (ib *Inbox) Middleware(cfg MiddlewareConfig) (message.HandlerMiddleware, error) {
	if cfg.Consumer == "" {
		return nil, fmt.Errorf("inbox: middleware: %w: MiddlewareConfig.Consumer is empty", ErrInvalidConsumer)
	}
	if cfg.DB == nil {
		return nil, errors.New("inbox: middleware: MiddlewareConfig.DB is nil")
	}
	if cfg.OnInvalidID < NackInvalidID || cfg.OnInvalidID > HandleInvalidID {
		return nil, fmt.Errorf("inbox: middleware: MiddlewareConfig.OnInvalidID is %v, not one of the defined actions", cfg.OnInvalidID)
	}
	if cfg.EventIDKey == "" {
		cfg.EventIDKey = EventIDKeyDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	m := &middleware{ib: ib, cfg: cfg}
	return m.wrap, nil
}

type middleware struct {
	ib  *Inbox
	cfg MiddlewareConfig
}

func (m *middleware) wrap(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		id, err := m.eventID(msg)
		if err != nil {
			switch m.cfg.OnInvalidID {
			case DropInvalidID:
				m.cfg.Logger.WarnContext(msg.Context(), "inbox: dropped a message without a usable event id",
					"consumer", m.cfg.Consumer, "message_uuid", msg.UUID, "error", err)
				return nil, nil
			case HandleInvalidID:
				return m.handle(msg, h, uuid.Nil, false)
			default:
				return nil, err
			}
		}
		return m.handle(msg, h, id, true)
	}
}

func (m *middleware) handle(msg *message.Message, h message.HandlerFunc, id uuid.UUID, claim bool) ([]*message.Message, error) {
	ctx := msg.Context()
	var produced []*message.Message
	processed, err := m.ib.run(ctx, m.cfg.DB, m.cfg.Consumer, id, claim, func(tx *sql.Tx) error {
		// The transaction is valid only inside this call; later middleware
		// and the router's ack see the original context again.
		msg.SetContext(context.WithValue(ctx, txKey{}, tx))
		defer msg.SetContext(ctx)
		var err error
		produced, err = h(msg)
		return err
	})
	if err != nil {
		return nil, err
	}
	if !processed {
		m.cfg.Logger.DebugContext(ctx, "inbox: skipped a duplicate delivery",
			"consumer", m.cfg.Consumer, "event_id", id, "message_uuid", msg.UUID)
		return nil, nil
	}
	return produced, nil
}

func (m *middleware) eventID(msg *message.Message) (uuid.UUID, error) {
	raw, source := msg.Metadata.Get(m.cfg.EventIDKey), "metadata "+m.cfg.EventIDKey
	if raw == "" && m.cfg.FallbackToUUID {
		raw, source = msg.UUID, "message UUID"
	}
	return parseEventID(msg.UUID, raw, source, m.cfg.EventIDKey)
}

// MessageEventID returns the event id a message carries in its metadata
// under key (EventIDKeyDefault if key is empty), for handlers that call
// Process or Run themselves, e.g. on a GORM or ent transaction. The error
// matches ErrNoEventID or ErrInvalidEventID.
func MessageEventID(msg *message.Message, key string) (uuid.UUID, error) {
	if key == "" {
		key = EventIDKeyDefault
	}
	return parseEventID(msg.UUID, msg.Metadata.Get(key), "metadata "+key, key)
}

func parseEventID(msgUUID, raw, source, key string) (uuid.UUID, error) {
	if raw == "" {
		return uuid.Nil, fmt.Errorf("%w: message %s has no %q metadata", ErrNoEventID, msgUUID, key)
	}
	id, err := uuid.Parse(raw)
	if err != nil {
		return uuid.Nil, fmt.Errorf("%w: message %s: %s %q is not a UUID", ErrInvalidEventID, msgUUID, source, raw)
	}
	if id == uuid.Nil {
		return uuid.Nil, fmt.Errorf("%w: message %s: %s is the nil UUID", ErrInvalidEventID, msgUUID, source)
	}
	return id, nil
}

type txKey struct{}

// TxFromContext returns the transaction the middleware opened for the
// message being handled: call it with msg.Context() in the handler and make
// every database change on it.
func TxFromContext(ctx context.Context) (*sql.Tx, bool) {
	tx, ok := ctx.Value(txKey{}).(*sql.Tx)
	return tx, ok
}
