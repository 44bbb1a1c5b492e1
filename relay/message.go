package relay

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/relay/internal/publish"
)

// Message converts an event to the Watermill message the relay publishes:
// the message UUID is the event id, the payload the event payload, and the
// metadata the event's headers plus the Metadata* keys. Use it to publish
// events the same way from elsewhere (e.g. replays). Both modes publish
// this message (with CloudEventsConfig's headers when enabled).
func Message(e txoutbox.Event) *message.Message {
	return publish.Message(&e)
}
