package claimcheck_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/claimcheck"
	"github.com/txoutbox/txoutbox/relay"
)

// The relay offloads a large event's payload and publishes the reference;
// the consumer's middleware gives the handler the payload back.
func Example() {
	ctx := context.Background()
	store, err := claimcheck.Open(ctx, "mem://", claimcheck.Config{}) // s3://bucket?region=… in production
	if err != nil {
		panic(err)
	}
	defer store.Close()

	// What the relay does with an event over the threshold
	// (relay.Config{LargePayloads: relay.LargePayloadsConfig{Store: store}}):
	e, _ := txoutbox.NewEvent("invoices", "invoice", "inv-7", "invoice.issued",
		map[string]string{"pdf": string(bytes.Repeat([]byte("%PDF"), 1<<18))})
	ref, err := store.Offload(ctx, txoutbox.Table{}, relay.Message(e))
	if err != nil {
		panic(err)
	}
	fmt.Println("published:", len(ref.Payload), "bytes, key", ref.Metadata.Get(txoutbox.HeaderAggregateID),
		"size", ref.Metadata.Get(claimcheck.HeaderSize))

	// A consumer's handler behind the middleware.
	handler := claimcheck.Middleware(store)(func(msg *message.Message) ([]*message.Message, error) {
		fmt.Println("handled:", len(msg.Payload), "bytes, same as written:", bytes.Equal(msg.Payload, e.Payload))
		return nil, nil
	})
	if _, err := handler(ref); err != nil {
		panic(err)
	}
	// Output:
	// published: 0 bytes, key inv-7 size 1048586
	// handled: 1048586 bytes, same as written: true
}
