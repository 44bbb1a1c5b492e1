package schema

import (
	"context"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"github.com/google/uuid"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
)

// Payment records custom events only, with a UUID ID and a small payload
// limit.
type Payment struct{ ent.Schema }

// Mixin of Payment.
func (Payment) Mixin() []ent.Mixin {
	return []ent.Mixin{entoutbox.Mixin{
		Topic:  "payments",
		Events: paymentEvents,
		Writer: txoutbox.WriterConfig{MaxPayloadBytes: 256},
	}}
}

// Fields of Payment.
func (Payment) Fields() []ent.Field {
	return []ent.Field{
		field.UUID("id", uuid.UUID{}).Default(uuid.New),
		field.Int64("amount"),
		field.String("memo").Default(""),
	}
}

// paymentEvents announces recorded payments and ignores other operations.
func paymentEvents(_ context.Context, c entoutbox.Change) ([]txoutbox.Event, error) {
	if c.Op != ent.OpCreate {
		return nil, nil
	}
	amount, _ := c.Mutation.Field("amount")
	memo, _ := c.Mutation.Field("memo")
	ev, err := c.NewEvent("payment.recorded", map[string]any{"amount": amount, "memo": memo})
	if err != nil {
		return nil, err
	}
	return []txoutbox.Event{ev}, nil
}
