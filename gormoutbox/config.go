package gormoutbox

import (
	"errors"
	"fmt"

	"github.com/txoutbox/txoutbox"
)

// TxPolicy says what the plugin does when a statement that has outbox
// events to write is not inside a transaction.
type TxPolicy int

const (
	// TxRequire refuses the statement before any SQL runs, with an error
	// matching ErrNoTransaction. It is the default: a statement run with
	// SkipDefaultTransaction is usually a mistake when it carries events.
	TxRequire TxPolicy = iota

	// TxBegin opens a transaction around the model write and the outbox
	// insert, as GORM's default transaction would, and commits or rolls it
	// back before the statement returns. Statements that have no events
	// to write still run without a transaction.
	TxBegin
)

// String returns the policy's name.
func (p TxPolicy) String() string {
	switch p {
	case TxRequire:
		return "TxRequire"
	case TxBegin:
		return "TxBegin"
	}
	return fmt.Sprintf("TxPolicy(%d)", int(p))
}

// Config configures the plugin. The zero value is valid: the "outbox" table
// on the connection's search_path, no default topic (every event or model
// names its topic), txoutbox.MaxPayloadBytesDefault, NOTIFY on, and
// TxRequire.
type Config struct {
	// Writer configures the outbox table, the payload limit, NOTIFY and
	// trace capture, as for entoutbox.Mixin; see txoutbox.WriterConfig
	// for each default.
	Writer txoutbox.WriterConfig

	// DefaultTopic is the topic of events that name none, when the model
	// does not implement Topicer either. Empty means such events are
	// rejected at write time (txoutbox.ErrInvalidEvent, field Topic).
	DefaultTopic string

	// TxPolicy is what happens when a statement with events to write is
	// not in a transaction. Default: TxRequire.
	TxPolicy TxPolicy
}

// validate checks the fields the Writer does not check itself.
func (c Config) validate() error {
	if c.TxPolicy != TxRequire && c.TxPolicy != TxBegin {
		return fmt.Errorf("gormoutbox: Config.TxPolicy: unknown value %d (want TxRequire or TxBegin)", int(c.TxPolicy))
	}
	if c.DefaultTopic != "" {
		// Reuse the Writer's rules instead of restating Kafka's topic rules.
		probe := txoutbox.Event{Topic: c.DefaultTopic, Type: "probe", AggregateID: "probe", Payload: []byte("{}")}
		if err := probe.Validate(); err != nil {
			var ve *txoutbox.ValidationError
			if errors.As(err, &ve) {
				return fmt.Errorf("gormoutbox: Config.DefaultTopic: %s", ve.Reason)
			}
			return fmt.Errorf("gormoutbox: Config.DefaultTopic: %w", err)
		}
	}
	return nil
}
