// Package claimcheck lets the outbox carry events of any size: the relay
// stores a payload too large for the broker in object storage and
// publishes a small reference record instead; consumers get the same
// bytes back, checked against the reference's SHA-256.
//
// On the relay (package relay or walrelay):
//
//	store, err := claimcheck.Open(ctx, "s3://payloads?region=eu-west-1", claimcheck.Config{})
//	cfg := relay.Config{LargePayloads: relay.LargePayloadsConfig{Store: store}}
//
// or `outbox relay --large-payloads s3://payloads?region=eu-west-1`. An
// event whose record would pass the threshold (by default three quarters
// of the publisher's largest record: kafkapub's MaxMessageBytes) is
// uploaded under a key made of the table and the event id, then its
// reference is published: same key, event id, headers and CloudEvents
// attributes, an empty value, and the headers HeaderKey, HeaderStore,
// HeaderSize and HeaderSHA256. A retry, a duplicate, a second relay or a
// replay writes the same object; a crash between upload and publish
// leaves the row pending, published later. The store away or slow is an
// outage like the broker's: the event is retried with backoff and never
// goes dead, and Check, which outbox relay's /readyz calls, fails naming
// the store.
//
// On the consumer, with Watermill:
//
//	router.AddMiddleware(claimcheck.Middleware(store)) // before inbox's middleware, if any
//
// and the handler sees the payload as if the event had been small.
// Without Watermill, pass a record's headers to Store.Fetch.
//
// Writers must let large events through: raise
// txoutbox.WriterConfig.MaxPayloadBytes (1 MiB less 8 KiB by default)
// to the largest event the application writes. Objects are kept for
// Config.Retention after their last upload; run Store.Prune periodically
// (outbox relay does). docs/large-payloads.md has the rest.
package claimcheck
