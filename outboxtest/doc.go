// Package outboxtest asserts, in an application's own tests, what events
// its code recorded in the outbox: by topic, type, aggregate, headers and
// payload, in order, with failures that show what the outbox holds
// instead.
//
//	err := orders.Place(ctx, db, order) // the code under test
//	e := outboxtest.RequireEvent(ctx, t, db, outboxtest.Want{Type: "order.placed", AggregateID: "42"})
//	placed := outboxtest.Payload[OrderPlaced](t, e)
//
// The assertions read the outbox through what the test holds (see
// Querier): a *sql.Tx or a pgx.Tx sees the events the transaction wrote
// before it commits, a *sql.DB or a *pgxpool.Pool what committed. GORM's
// *gorm.DB and ent's generated *Tx and *Client are taken as they are, and
// this package imports neither: the tx of db.Transaction, or an ent *Tx,
// sees the transaction's events; the db or the client what committed. See
// the Examples of gormoutbox and entoutbox.
//
// To check what the relay would publish, and that the application's
// consumers handle it, package relay/relaytest runs the relay until the
// outbox is drained into a recording Watermill publisher, with no broker
// and no sleeps. It lives in the relay module: this package is in the root
// module and brings no dependency a gormoutbox or entoutbox user does not
// already have.
//
// The assertions take a TB, which testing.TB satisfies; they stop the test
// with Fatalf on failure.
package outboxtest
