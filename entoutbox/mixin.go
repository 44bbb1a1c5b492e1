package entoutbox

import (
	"context"
	"errors"
	"fmt"

	"entgo.io/ent"
	"entgo.io/ent/schema/mixin"

	"github.com/txoutbox/txoutbox"
)

// Mixin records outbox events for every mutation of the entity it is mixed
// into, in the mutation's transaction. Its zero value is not usable: set
// ChangeEvents (with Topic), Events, or both.
//
//	func (Order) Mixin() []ent.Mixin {
//		return []ent.Mixin{entoutbox.Mixin{Topic: "orders", ChangeEvents: true}}
//	}
type Mixin struct {
	mixin.Schema

	// Topic is where the events go. It is required with ChangeEvents, and
	// is the default topic of the events Events returns.
	Topic string

	// AggregateType names the entity in events. Default: the ent type name
	// in snake case ("Order" is "order", "OrderItem" is "order_item").
	AggregateType string

	// ChangeEvents turns on one event per created, updated or deleted row:
	// type "<AggregateType>.created", ".updated" or ".deleted", aggregate
	// id the entity's ID, payload a ChangePayload. Fields marked
	// Sensitive() in the schema are left out.
	ChangeEvents bool

	// SkipOldValues leaves the old values out of the change events of
	// UpdateOne, and out of Change.Old. Loading them costs one SELECT of the
	// row before the update. Update of many rows never has old values: ent
	// provides them for UpdateOne only.
	SkipOldValues bool

	// Events, if set, returns events for one changed row, written after
	// the change event (if any) in the same statement. Events that leave
	// Topic, AggregateType or AggregateID empty get the Mixin's topic,
	// aggregate type and the row's ID. It runs after the mutation, so an
	// error from it fails the mutation, which the caller must roll back.
	Events func(ctx context.Context, c Change) ([]txoutbox.Event, error)

	// Writer configures the outbox table, the payload limit and NOTIFY.
	// Default: table "outbox" on the connection's search_path, 1 MiB less 8 KiB.
	Writer txoutbox.WriterConfig
}

// Change describes one row a mutation changed, for Mixin.Events.
type Change struct {
	// Op is the operation: ent.OpCreate, OpUpdate, OpUpdateOne, OpDelete
	// or OpDeleteOne.
	Op ent.Op
	// Mutation has the fields that were set (Fields, Field), added
	// (AddedFields) and cleared. It has already run: OldField no longer
	// works, use Old. Type-assert it to the generated mutation for typed
	// access.
	Mutation ent.Mutation
	// ID is the row's ID, as its generated type (int, uuid.UUID, ...).
	ID any
	// AggregateID is ID as the event's aggregate id (fmt.Sprint(ID)).
	AggregateID string
	// Old holds the values before an UpdateOne of the fields it set,
	// cleared or added, unless SkipOldValues, Sensitive fields included.
	// Nil for other operations.
	Old map[string]ent.Value

	topic, aggregateType string
}

// NewEvent returns an event of the given type about the changed row, on
// the Mixin's topic and aggregate type, with v marshaled as JSON.
func (c Change) NewEvent(eventType string, v any) (txoutbox.Event, error) {
	return txoutbox.NewEvent(c.topic, c.aggregateType, c.AggregateID, eventType, v)
}

// Validate reports a configuration error. A Mixin that does not validate
// fails every mutation of its entity with this error, so calling Validate
// at start-up or in a test finds it earlier.
func (mx Mixin) Validate() error {
	if !mx.ChangeEvents && mx.Events == nil {
		return errors.New("entoutbox: Mixin has neither ChangeEvents nor Events, so it would record nothing")
	}
	if mx.ChangeEvents && mx.Topic == "" {
		return errors.New("entoutbox: Mixin.ChangeEvents needs a Topic")
	}
	if _, err := txoutbox.NewWriter(mx.Writer); err != nil {
		return fmt.Errorf("entoutbox: Mixin.Writer: %w", err)
	}
	return nil
}

// Hooks implements ent.Mixin: one hook that writes the mutation's events.
// It needs the generated ent/runtime package imported somewhere in the
// program; without it ent fails mutations with "ent: uninitialized hook
// (forgotten import ent/runtime?)".
func (mx Mixin) Hooks() []ent.Hook {
	h, err := newHook(mx)
	return []ent.Hook{func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			if err != nil {
				return nil, fmt.Errorf("entoutbox: %s mutation: %w", m.Type(), err)
			}
			return h.mutate(ctx, m, next)
		})
	}}
}

var _ ent.Mixin = Mixin{}
