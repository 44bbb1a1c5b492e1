package gormoutbox

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox"
)

// Events records a model's domain events until the plugin writes them.
// Embed it by value, tagged `gorm:"-"`, in a model:
//
//	type Order struct {
//		ID    uint
//		Total int64
//		gormoutbox.Events `gorm:"-"`
//	}
//
// Domain methods on a pointer receiver record events; the next Create,
// Save, Updates or Delete of the model writes them to the outbox in the
// statement's transaction and empties the recorder. Events recorded in the
// model's own Before/After hooks are included, so an AfterCreate hook can
// record an event about a row whose primary key now exists.
//
// The recorder empties whenever a Create, Save, Updates or Delete of the
// model reaches the plugin, whether the statement then succeeded, failed,
// or was refused before any SQL ran (ErrNoTransaction): retry the unit of
// work, recording included. Only an update or delete that matched no row,
// and DryRun or ToSQL, leave the events recorded. Events written in a transaction that later
// rolls back are gone too: a retried transaction records them again, which
// is what rerunning the domain code that recorded them does.
//
// Like the model it is part of, an Events is not safe for concurrent use.
// Copying a model copies its pending events; only the copy that is saved is
// emptied.
type Events struct {
	pending []recorded
}

// recorded is an event waiting to be written. Fields left empty are filled
// from the model when it is written; err is a payload that failed to marshal,
// reported by the save.
type recorded struct {
	event txoutbox.Event
	err   error
}

// Record records an event of type eventType whose payload is v marshaled as
// JSON now, so later changes to v do not alter it. The event's topic,
// aggregate type and aggregate id are filled when it is written: the topic
// from the model's OutboxTopic method or Config.DefaultTopic, the aggregate
// type from the model's OutboxAggregateType method or its snake_cased type
// name, and the aggregate id from the model's primary key as it is at write
// time (so a new model's key, assigned by the insert, is used).
//
// A payload that cannot be marshaled fails the save that would write it.
func (e *Events) Record(eventType string, v any) {
	payload, err := json.Marshal(v)
	if err != nil {
		err = fmt.Errorf("gormoutbox: marshal %s payload: %w", eventType, err)
	}
	e.pending = append(e.pending, recorded{
		event: txoutbox.Event{Type: eventType, ContentType: txoutbox.ContentTypeJSON, Payload: payload, CreatedAt: time.Now()},
		err:   err,
	})
}

// RecordEvent records a fully built event, e.g. one with its own topic,
// aggregate id, content type or headers. Its empty Topic, AggregateType and
// AggregateID are filled at write time as for Record; a zero ID and
// CreatedAt are assigned by the writer.
func (e *Events) RecordEvent(ev txoutbox.Event) {
	e.pending = append(e.pending, recorded{event: ev})
}

// Pending returns a copy of the events recorded and not yet written, with
// the fields that are filled at write time still empty.
func (e *Events) Pending() []txoutbox.Event {
	out := make([]txoutbox.Event, len(e.pending))
	for i, r := range e.pending {
		out[i] = r.event
	}
	return out
}

// Discard drops the pending events without writing them.
func (e *Events) Discard() { e.pending = nil }

// take empties the recorder and returns what it held.
func (e *Events) take() []recorded {
	p := e.pending
	e.pending = nil
	return p
}

// outboxEvents lets the plugin find the recorder in any model that embeds
// Events; being unexported, only an embedded Events can provide it.
func (e *Events) outboxEvents() *Events { return e }

// recorder is implemented by a pointer to every model that embeds Events.
type recorder interface{ outboxEvents() *Events }
