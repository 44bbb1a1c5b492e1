package gormoutbox_test

import (
	"strconv"

	"github.com/txoutbox/txoutbox"
)

func itoa(i int) string { return strconv.Itoa(i) }

// badTopicEvent is an event the writer's validation rejects.
func badTopicEvent() txoutbox.Event {
	return txoutbox.Event{Topic: "bad topic!", Type: "x", Payload: []byte(`{}`)}
}
