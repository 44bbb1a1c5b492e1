package main

import (
	"regexp"
	"strings"
)

// configFlags maps the fields of relay.Config, relay.GroupConfig,
// walrelay.Config and kafkapub.Config to the flags of `outbox relay` that
// set them, so that their Validate's errors name what the user typed.
var configFlags = map[string]string{
	// relay.Config and relay.GroupConfig
	"BatchSize":         "batch",
	"BatchBytes":        "batch-bytes",
	"MaxInFlight":       "max-in-flight",
	"MaxInFlightBytes":  "max-in-flight-bytes",
	"Lanes":             "lanes",
	"LaneBatch":         "lane-batch",
	"MaxAttempts":       "max-attempts",
	"PollInterval":      "poll-interval",
	"ClaimCooldown":     "claim-cooldown",
	"LeaseDuration":     "lease",
	"HeartbeatInterval": "heartbeat",
	"StaleAfter":        "stale-after",
	"BackoffMin":        "backoff-min",
	"BackoffMax":        "backoff-max",
	"OutageBackoffMax":  "outage-backoff-max",
	"Retention":         "retention",
	"PruneInterval":     "prune-interval",
	"StatementTimeout":  "statement-timeout",
	"LockTimeout":       "lock-timeout",
	"PublishTimeout":    "publish-timeout",
	"ID":                "id",
	"DiscoverInterval":  "discover-interval",
	"ClaimConns":        "claim-conns",
	// walrelay.Config
	"Slot":            "slot",
	"Publication":     "publication",
	"SenderTimeout":   "sender-timeout",
	"StandbyRetry":    "standby-retry",
	"CleanupInterval": "cleanup-interval",
	// kafkapub.Config
	"Linger": "kafka-linger",
}

// configPaths are fields of nested configurations, named with their
// path, and their flags.
var configPaths = map[string]string{
	"LargePayloads.Over": "large-payloads-over",
}

// configField is a word that may name a configuration field.
var configField = regexp.MustCompile(`\b[A-Z][A-Za-z]*\b`)

// flagUsage is err, from the Validate of a configuration the flags build,
// as a usage error naming the flags rather than the fields.
func flagUsage(err error) error {
	return usagef("%s", configField.ReplaceAllStringFunc(pathFlags(err.Error()), func(word string) string {
		if f, ok := configFlags[word]; ok {
			return "--" + f
		}
		return word
	}))
}

// pathFlags is msg with the nested fields it names (configPaths) as their
// flags.
func pathFlags(msg string) string {
	for path, f := range configPaths {
		msg = strings.ReplaceAll(msg, path, "--"+f)
	}
	return msg
}
