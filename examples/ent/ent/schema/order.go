// Package schema is the ent schema of the ent example.
package schema

import (
	"context"
	"fmt"

	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
)

// Order is the aggregate. The mixin turns its mutations into domain events
// written in the mutation's transaction.
type Order struct{ ent.Schema }

// Mixin of Order.
func (Order) Mixin() []ent.Mixin {
	return []ent.Mixin{entoutbox.Mixin{Topic: "orders", Events: orderEvents}}
}

// Fields of Order.
func (Order) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("total").Comment("cents"),
		field.Enum("status").Values("placed", "paid", "cancelled").Default("placed"),
		field.String("cancel_reason").Optional(),
	}
}

// orderEvents derives the domain events from the mutation: the placement of
// an order and each change of its status.
func orderEvents(_ context.Context, c entoutbox.Change) ([]txoutbox.Event, error) {
	m := c.Mutation
	var ev txoutbox.Event
	var err error
	switch {
	case c.Op == ent.OpCreate:
		total, _ := m.Field("total")
		ev, err = c.NewEvent("order.placed", map[string]any{"total": total})
	case c.Op == ent.OpUpdateOne:
		status, ok := m.Field("status")
		if !ok {
			return nil, nil
		}
		payload := map[string]any{"from": fmt.Sprint(c.Old["status"])}
		if reason, ok := m.Field("cancel_reason"); ok {
			payload["reason"] = reason
		}
		ev, err = c.NewEvent(fmt.Sprintf("order.%s", status), payload)
	default:
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []txoutbox.Event{ev}, nil
}
