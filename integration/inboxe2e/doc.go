// Package inboxe2e holds the inbox's tests that need GORM, ent or a Kafka
// consumer (Sarama, watermill-kafka). They live in the integration module so
// that the inbox module requires none of these; the inbox module keeps its
// PostgreSQL-only tests.
package inboxe2e
