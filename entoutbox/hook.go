package entoutbox

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"unicode"

	"entgo.io/ent"

	"github.com/txoutbox/txoutbox"
)

// generated is what the entc extension adds to every mutation.
type generated interface {
	Tx
	EntoutboxID() (any, bool)
	EntoutboxIDs(ctx context.Context) ([]any, error)
	EntoutboxSensitive(field string) bool
}

// hook is one schema's Mixin, validated, with its writer.
type hook struct {
	mx Mixin
	ws map[txoutbox.Dialect]writerOrErr // by the ent driver's dialect

	// bulks are the CreateBulk chains in progress, by transaction driver.
	// ent runs a bulk's hooks nested, builder 0's outermost, and each
	// hook's code after next.Mutate runs innermost first: writing there
	// would give the last entity the lowest outbox id. The outermost
	// create writes the whole chain's events instead, in builder order.
	mu    sync.Mutex
	bulks map[any]*bulk
}

// bulk gathers the events of the creates nested inside an outer one.
type bulk struct {
	nested [][]txoutbox.Event // innermost first
}

func newHook(mx Mixin) (*hook, error) {
	if err := mx.Validate(); err != nil {
		return nil, err
	}
	ws := writersFor(mx.Writer)
	if mx.Writer.Dialect == 0 {
		// PostgreSQL's must build, as before MySQL; MySQL's error, if
		// any, is reported at a write on MySQL.
		if err := ws[txoutbox.PostgreSQL].err; err != nil {
			return nil, err
		}
	} else if err := ws[mx.Writer.Dialect].err; err != nil {
		return nil, err
	}
	return &hook{mx: mx, ws: ws, bulks: map[any]*bulk{}}, nil
}

// enterCreate registers a create on drv's transaction. It returns the bulk
// to add this create's events to when an outer create of the same schema is
// in progress on the transaction, or nil when this create is the outermost
// and done must be called once it has written.
func (h *hook) enterCreate(drv any) (outer *bulk, done func() *bulk) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.bulks[drv]; ok {
		return b, nil
	}
	b := &bulk{}
	h.bulks[drv] = b
	return nil, func() *bulk {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.bulks, drv)
		return b
	}
}

// mutate runs the mutation and writes its events on the same transaction.
// Everything that can be refused without the database (no transaction, no
// generated methods) is refused before any SQL runs.
func (h *hook) mutate(ctx context.Context, m ent.Mutation, next ent.Mutator) (ent.Value, error) {
	op := m.Op()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("entoutbox: %s %s: "+format, append([]any{opName(op), m.Type()}, args...)...)
	}
	g, ok := m.(generated)
	if !ok {
		return nil, fail("%w (mutation type %T)", ErrNotGenerated, m)
	}
	ex, d, err := execer(g)
	if err != nil {
		return nil, fail("%w", err)
	}
	we := h.ws[d]
	if we.err != nil {
		return nil, fail("%w", we.err)
	}
	var (
		outer    *bulk
		doneBulk func() *bulk
	)
	if drv, _ := g.EntoutboxDriver(); op.Is(ent.OpCreate) && reflect.TypeOf(drv).Comparable() {
		if outer, doneBulk = h.enterCreate(drv); doneBulk != nil {
			defer doneBulk()
		}
	}

	// What identifies the rows, and their old values, must be read before
	// the statement: ent refuses OldField once a mutation is done, and
	// afterwards the rows of an Update may no longer match its predicates.
	var ids []any
	var old map[string]ent.Value
	switch {
	case op.Is(ent.OpUpdate | ent.OpDelete):
		if ids, err = g.EntoutboxIDs(ctx); err != nil {
			return nil, fail("read IDs: %w", err)
		}
	case op.Is(ent.OpUpdateOne) && !h.mx.SkipOldValues:
		if old, err = oldValues(ctx, m); err != nil {
			return nil, fail("%w", err)
		}
	}

	v, err := next.Mutate(ctx, m)
	if err != nil {
		return v, err
	}

	if op.Is(ent.OpUpdate | ent.OpDelete) {
		// EntoutboxIDs restricted the statement to ids, so it changed a
		// subset of them; fewer means a concurrent transaction changed or
		// deleted some in between, and we cannot tell which.
		if n, ok := v.(int); ok && n != len(ids) {
			return nil, fail("%w: %d rows matched when their IDs were read, %d when changed", ErrConcurrentChange, len(ids), n)
		}
	} else {
		id, ok := g.EntoutboxID()
		if !ok {
			return nil, fail("the mutation has no ID after it ran")
		}
		ids = []any{id}
	}
	events, err := h.events(ctx, m, g, op, ids, old)
	if err != nil {
		return nil, fail("%w", err)
	}
	if outer != nil {
		// A later builder of a CreateBulk: the outermost writes it.
		h.mu.Lock()
		outer.nested = append(outer.nested, events)
		h.mu.Unlock()
		return v, nil
	}
	if doneBulk != nil {
		nested := doneBulk()
		for i := len(nested.nested) - 1; i >= 0; i-- {
			events = append(events, nested.nested[i]...)
		}
	}
	if err := we.w.Write(ctx, ex, events...); err != nil {
		return nil, fail("%w", err)
	}
	return v, nil
}

// events builds the events of every changed row.
func (h *hook) events(ctx context.Context, m ent.Mutation, g generated, op ent.Op, ids []any, old map[string]ent.Value) ([]txoutbox.Event, error) {
	aggType := h.mx.AggregateType
	if aggType == "" {
		aggType = snake(m.Type())
	}
	var events []txoutbox.Event
	var change changeEvent
	if h.mx.ChangeEvents {
		change = newChangeEvent(m, g, op, aggType, old)
		events = make([]txoutbox.Event, 0, len(ids))
	}
	for _, id := range ids {
		aggID := fmt.Sprint(id)
		if h.mx.ChangeEvents {
			ev, err := change.event(h.mx.Topic, id, aggID)
			if err != nil {
				return nil, err
			}
			events = append(events, ev)
		}
		if h.mx.Events == nil {
			continue
		}
		custom, err := h.mx.Events(ctx, Change{
			Op: op, Mutation: m, ID: id, AggregateID: aggID, Old: old,
			topic: h.mx.Topic, aggregateType: aggType,
		})
		if err != nil {
			return nil, fmt.Errorf("Mixin.Events for ID %s: %w", aggID, err)
		}
		for i := range custom {
			e := &custom[i]
			if e.Topic == "" {
				e.Topic = h.mx.Topic
			}
			if e.AggregateType == "" {
				e.AggregateType = aggType
			}
			if e.AggregateID == "" {
				e.AggregateID = aggID
			}
		}
		events = append(events, custom...)
	}
	return events, nil
}

// oldValues loads the values an UpdateOne is about to change. ent reads the
// row once, in the mutation's transaction, for all of them.
func oldValues(ctx context.Context, m ent.Mutation) (map[string]ent.Value, error) {
	names := changedFields(m)
	if len(names) == 0 {
		return nil, nil
	}
	old := make(map[string]ent.Value, len(names))
	for _, name := range names {
		v, err := m.OldField(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("load old value of %s: %w", name, err)
		}
		old[name] = v
	}
	return old, nil
}

// changedFields lists the fields a mutation sets, adds to or clears.
func changedFields(m ent.Mutation) []string {
	names := append(m.Fields(), m.AddedFields()...)
	names = append(names, m.ClearedFields()...)
	seen := make(map[string]bool, len(names))
	out := names[:0]
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func opName(op ent.Op) string {
	switch op {
	case ent.OpCreate:
		return "create"
	case ent.OpUpdate:
		return "update"
	case ent.OpUpdateOne:
		return "update one"
	case ent.OpDelete:
		return "delete"
	case ent.OpDeleteOne:
		return "delete one"
	}
	return op.String()
}

// snake converts an ent type name to snake case: "OrderItem" to
// "order_item", "HTTPLog" to "http_log".
func snake(s string) string {
	r := []rune(s)
	var b strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) {
			if i > 0 && (unicode.IsLower(r[i-1]) || i+1 < len(r) && unicode.IsLower(r[i+1]) && unicode.IsUpper(r[i-1])) {
				b.WriteByte('_')
			}
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}
