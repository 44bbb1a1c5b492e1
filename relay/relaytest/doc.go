// Package relaytest runs the relay in an application's own tests: a
// recording Watermill publisher (Publisher) that keeps what the relay
// published, with its keys and headers, and can be told to fail; and
// Drain, which runs a relay until the outbox is drained and returns, so a
// test needs no broker and no sleeps.
//
//	pub := relaytest.NewPublisher()
//	err := relaytest.Drain(ctx, db, pub, relay.Config{}) // db: *sql.DB
//	for _, m := range pub.Topic("orders") {
//		err := handler(m.Message) // the consumer's handler, on what the relay would publish
//	}
//
// Failures: pub.Fail(relaytest.Failure{Topic: "orders", Times: 1}) refuses
// the next message to "orders" as an outage (retried, never dead);
// Permanent: true refuses it as the event's own fault, which makes it
// dead after the relay's MaxAttempts and Drain return an error matching
// ErrDead.
//
// pub.OnPublish(fn) has the publisher call fn with each message before it
// keeps or refuses it, outside its lock: fn blocks to hold a publish in
// flight (until the test closes a channel), or notes what comes when.
//
// Delayed events (txoutbox.Event.NotBefore) are waited for when they come
// due before Drain's deadline; WithClock publishes those delayed up to a
// test's own clock at once, and an error matching ErrScheduled lists
// those left for later.
//
// Package outboxtest asserts on the outbox's rows themselves, before or
// after a drain. relaytest is in the relay module, with Watermill; the
// assertions are in the root module, so that they bring nothing to a
// gormoutbox or entoutbox user's module graph.
package relaytest
