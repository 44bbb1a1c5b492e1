// Package testkit gives txoutbox's tests real infrastructure: an isolated
// PostgreSQL schema per test on the local server, and a Kafka-protocol broker
// (franz-go's kfake) on a loopback port that real clients dial over TCP.
//
// A missing PostgreSQL fails the test with instructions; it never skips, so a
// CI run without a database cannot pass by testing nothing.
package testkit
