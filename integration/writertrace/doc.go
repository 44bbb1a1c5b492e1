// Package writertrace holds the root package's tests that need the
// OpenTelemetry SDK, kept out of the root module so its users do not get the
// SDK in their module graphs.
package writertrace
