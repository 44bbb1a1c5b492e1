// Package relaye2e holds relay's end-to-end tests: through a Kafka-protocol
// broker (kfake, franz-go), RabbitMQ's Watermill publisher and the
// OpenTelemetry SDK. They live in the integration module so that the relay
// module requires none of these, and its users do not get them in their
// module graphs. relay's own module keeps its PostgreSQL-only tests.
package relaye2e
