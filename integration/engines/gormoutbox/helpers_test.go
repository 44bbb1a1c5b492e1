package gormoutbox_test

import (
	"errors"
	"strconv"

	"github.com/txoutbox/txoutbox"
)

func itoa(i int) string { return strconv.Itoa(i) }

// badTopicEvent is an event the writer's validation rejects.
func badTopicEvent() txoutbox.Event {
	return txoutbox.Event{Topic: "bad topic!", Type: "x", Payload: []byte(`{}`)}
}

func mustEvent(t interface{ Fatal(...any) }, topic, aggType, aggID, typ string) txoutbox.Event {
	ev, err := txoutbox.NewEvent(topic, aggType, aggID, typ, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func isInvalidTable(err error) bool { return errors.Is(err, txoutbox.ErrInvalidTable) }
