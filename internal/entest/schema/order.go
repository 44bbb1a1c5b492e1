// Package schema is the ent schema of entoutbox's tests.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/txoutbox/txoutbox/entoutbox"
)

// Order records change events.
type Order struct{ ent.Schema }

// Mixin of Order.
func (Order) Mixin() []ent.Mixin {
	return []ent.Mixin{entoutbox.Mixin{Topic: "orders", ChangeEvents: true}}
}

// Fields of Order; Plain has the same.
func (Order) Fields() []ent.Field { return orderFields() }

// Hooks of Order: the test hook runs inside the outbox hook.
func (Order) Hooks() []ent.Hook { return []ent.Hook{testHook} }

// Plain is Order without the mixin.
type Plain struct{ ent.Schema }

// Fields of Plain.
func (Plain) Fields() []ent.Field { return orderFields() }

func orderFields() []ent.Field {
	return []ent.Field{
		field.Int64("total"),
		field.String("status").Default("placed"),
		field.String("note").Optional().Nillable(),
		field.String("secret").Optional().Sensitive(),
	}
}
