package entoutbox

import (
	"encoding/json"
	"fmt"

	"entgo.io/ent"

	"github.com/txoutbox/txoutbox"
)

// ChangePayload is the JSON payload of a change event. Field names are the
// schema's field names; fields marked Sensitive() are left out.
type ChangePayload struct {
	// ID is the entity's ID.
	ID any `json:"id"`
	// Fields holds the values a create or update set; a field an update
	// cleared is null. Absent from delete events.
	Fields map[string]any `json:"fields,omitempty"`
	// Added holds the increments of numeric fields (ent's AddX), whose
	// resulting value the mutation does not know.
	Added map[string]any `json:"added,omitempty"`
	// Old holds the values before an UpdateOne of the fields it changed.
	// Absent for other operations and with Mixin.SkipOldValues.
	Old map[string]any `json:"old,omitempty"`
}

// changeEvent is what the change events of one mutation share; only the ID
// differs between the rows of an Update or Delete of many.
type changeEvent struct {
	eventType, aggregateType string
	payload                  ChangePayload
}

func newChangeEvent(m ent.Mutation, g generated, op ent.Op, aggregateType string, old map[string]ent.Value) changeEvent {
	c := changeEvent{aggregateType: aggregateType}
	switch {
	case op.Is(ent.OpCreate):
		c.eventType = aggregateType + ".created"
	case op.Is(ent.OpUpdate | ent.OpUpdateOne):
		c.eventType = aggregateType + ".updated"
	default:
		c.eventType = aggregateType + ".deleted"
		return c
	}
	c.payload.Fields = make(map[string]any)
	for _, name := range m.Fields() {
		if !g.EntoutboxSensitive(name) {
			c.payload.Fields[name], _ = m.Field(name)
		}
	}
	for _, name := range m.ClearedFields() {
		if !g.EntoutboxSensitive(name) {
			c.payload.Fields[name] = nil
		}
	}
	for _, name := range m.AddedFields() {
		if !g.EntoutboxSensitive(name) {
			if c.payload.Added == nil {
				c.payload.Added = make(map[string]any)
			}
			c.payload.Added[name], _ = m.AddedField(name)
		}
	}
	for name, v := range old {
		if !g.EntoutboxSensitive(name) {
			if c.payload.Old == nil {
				c.payload.Old = make(map[string]any, len(old))
			}
			c.payload.Old[name] = v
		}
	}
	return c
}

func (c *changeEvent) event(topic string, id any, aggregateID string) (txoutbox.Event, error) {
	p := c.payload
	p.ID = id
	body, err := json.Marshal(p)
	if err != nil {
		return txoutbox.Event{}, fmt.Errorf("marshal %s payload: %w", c.eventType, err)
	}
	return txoutbox.Event{
		Topic:         topic,
		AggregateType: c.aggregateType,
		AggregateID:   aggregateID,
		Type:          c.eventType,
		ContentType:   txoutbox.ContentTypeJSON,
		Payload:       body,
	}, nil
}
