// Package schema is the ent schema of the benchmark harness.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"

	"github.com/txoutbox/txoutbox/entoutbox"
)

// Order writes a change event with every mutation.
type Order struct{ ent.Schema }

// Mixin of Order.
func (Order) Mixin() []ent.Mixin {
	return []ent.Mixin{entoutbox.Mixin{Topic: "orders", ChangeEvents: true}}
}

// Fields of Order; Plain has the same.
func (Order) Fields() []ent.Field { return orderFields() }

// Plain is Order without the mixin: the baseline of the overhead ratio.
type Plain struct{ ent.Schema }

// Fields of Plain.
func (Plain) Fields() []ent.Field { return orderFields() }

func orderFields() []ent.Field {
	return []ent.Field{
		field.Int64("total"),
		field.String("status").Default("placed"),
		field.String("note").Optional(),
	}
}
