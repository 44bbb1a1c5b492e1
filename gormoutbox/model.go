package gormoutbox

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"gorm.io/gorm/schema"
)

// Topicer is implemented by models that name the topic of their events.
// Events that set their own Topic keep it; "" means Config.DefaultTopic.
type Topicer interface {
	OutboxTopic() string
}

// AggregateTyper is implemented by models that name their aggregate type,
// the event header and the prefix of change events. Without it the type
// is the model's Go type name in snake_case (OrderItem: "order_item").
type AggregateTyper interface {
	OutboxAggregateType() string
}

// ChangeEventer is implemented by models that opt in to change events:
// every Create, Save, Updates and Delete of such a model writes one event
// per row, of type "<aggregate type>.created", ".updated" or ".deleted",
// whose payload is the model as JSON after the write and whose aggregate id
// is its primary key. The method is only a marker; its topic comes from
// Topicer or Config.DefaultTopic.
//
// Bulk updates and deletes of such a model need per-row data; see
// ErrNoRowData.
type ChangeEventer interface {
	OutboxChangeEvents()
}

// modelInfo is what the plugin needs to know about a model type, computed
// once per type.
type modelInfo struct {
	records       bool   // *T embeds Events
	changes       bool   // T or *T implements ChangeEventer
	aggregateType string // default aggregate type when T has no AggregateTyper
}

var (
	recorderType = reflect.TypeFor[recorder]()
	changerType  = reflect.TypeFor[ChangeEventer]()
	infoCache    sync.Map // reflect.Type -> *modelInfo
)

// infoOf returns what the plugin knows about the schema's model type.
func infoOf(s *schema.Schema) *modelInfo {
	if v, ok := infoCache.Load(s.ModelType); ok {
		return v.(*modelInfo)
	}
	ptr := reflect.PointerTo(s.ModelType)
	info := &modelInfo{
		records:       ptr.Implements(recorderType),
		changes:       ptr.Implements(changerType),
		aggregateType: schema.NamingStrategy{}.ColumnName("", s.Name),
	}
	v, _ := infoCache.LoadOrStore(s.ModelType, info)
	return v.(*modelInfo)
}

// eachModel calls fn with every addressable model struct in rv: rv itself,
// or the elements of a slice or array of structs or of pointers to them.
func eachModel(rv reflect.Value, fn func(reflect.Value)) {
	switch rv.Kind() {
	case reflect.Struct:
		if rv.CanAddr() {
			fn(rv)
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			e := rv.Index(i)
			for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
				if e.IsNil() {
					break
				}
				e = e.Elem()
			}
			if e.Kind() == reflect.Struct && e.CanAddr() {
				fn(e)
			}
		}
	}
}

// primaryKey formats the model's primary key for an aggregate id: the
// value as fmt prints it, composite keys joined with ":". It returns "" when
// the model has no primary key or any part of it is zero.
func primaryKey(ctx context.Context, s *schema.Schema, rv reflect.Value) string {
	switch len(s.PrimaryFields) {
	case 0:
		return ""
	case 1:
		v, zero := s.PrimaryFields[0].ValueOf(ctx, rv)
		if zero {
			return ""
		}
		return fmt.Sprint(v)
	}
	parts := make([]string, len(s.PrimaryFields))
	for i, f := range s.PrimaryFields {
		v, zero := f.ValueOf(ctx, rv)
		if zero {
			return ""
		}
		parts[i] = fmt.Sprint(v)
	}
	return strings.Join(parts, ":")
}

// hasRowData reports whether rv holds at least one model with a primary
// key, i.e. whether events can be derived per row.
func hasRowData(ctx context.Context, s *schema.Schema, rv reflect.Value) bool {
	found := false
	eachModel(rv, func(m reflect.Value) {
		if !found && primaryKey(ctx, s, m) != "" {
			found = true
		}
	})
	return found
}

// anyPending reports whether a model in rv has recorded events.
func anyPending(rv reflect.Value) bool {
	found := false
	eachModel(rv, func(m reflect.Value) {
		if r, ok := m.Addr().Interface().(recorder); ok && len(r.outboxEvents().pending) > 0 {
			found = true
		}
	})
	return found
}

// discardAll empties the recorders of every model in rv.
func discardAll(rv reflect.Value) {
	eachModel(rv, func(m reflect.Value) {
		if r, ok := m.Addr().Interface().(recorder); ok {
			r.outboxEvents().Discard()
		}
	})
}
