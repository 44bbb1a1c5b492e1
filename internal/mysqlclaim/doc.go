// Package mysqlclaim is the relay's claim cycle on MySQL 8 and MariaDB
// 10.6+: Claim takes due rows for a relay incarnation under a lease, and
// Mark, Fail and Release settle them, fenced by the claim's version. It
// keeps the rule the PostgreSQL claim keeps (internal/outboxsql/claim.md):
// a row is claimed only if every earlier unpublished row of its aggregate
// is held by the same incarnation or taken by the same claim. The SQL is
// internal/outboxsql's (mysql_relay.go); the reasons are in
// internal/outboxsql/claim_mysql.md.
//
// It uses database/sql alone, so the modules that import it need no MySQL
// driver:
//
//	c, err := mysqlclaim.Claim(ctx, db, names, mysqlclaim.Params{Owner: id, Limit: 100, Lease: time.Minute})
//	// publish c.Rows in order, then:
//	_, err = mysqlclaim.Mark(ctx, db, names, id, c.Version, published)
//
// The relay does not call it yet.
package mysqlclaim
