package harness

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// jsonEvent builds an event whose payload is a JSON string of size bytes.
func jsonEvent(topic, aggregateID, typ string, size int) txoutbox.Event {
	id, _ := uuid.NewV7()
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = 'x'
	}
	payload[0], payload[size-1] = '"', '"'
	return txoutbox.Event{ID: id, Topic: topic, AggregateType: "poison", AggregateID: aggregateID, Type: typ, Payload: payload}
}

// Emit writes events in a GORM transaction of their own with
// gormoutbox.Emit, and counts them as committed (or, with
// WriteConfig.UnknownOutcomes, as of unknown outcome if the transaction
// fails).
func (w *Writers) Emit(ctx context.Context, events ...txoutbox.Event) error {
	err := w.gorm.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return gormoutbox.Emit(tx, events...)
	})
	if err != nil && w.cfg.UnknownOutcomes && ctx.Err() == nil {
		// A database crash: the events may or may not have committed.
		w.mu.Lock()
		for _, ev := range events {
			w.unknownPerTopic[ev.Topic]++
		}
		w.mu.Unlock()
		w.unknownTxs.Add(1)
		return nil
	}
	if err != nil {
		return fmt.Errorf("emit: %w", err)
	}
	for _, ev := range events {
		w.Count(ev.Topic, 1)
	}
	return nil
}

// holdsClaims reports whether relay id (its Config.ID: the relays table's
// name, whose id is the incarnation's token) holds claimed rows right now.
// On MySQL a lease names the token's key (outboxsql.MySQLLeaseKey).
func holdsClaims(ctx context.Context, env *Env, id string) bool {
	names, err := env.names()
	if err != nil {
		return false
	}
	holder := `SELECT r.id FROM ` + names.Relays + ` r WHERE r.name = $1`
	if env.MySQL() {
		holder = `SELECT ` + outboxsql.MySQLRelayLeaseKey + ` FROM ` + names.Relays + ` r WHERE r.name = $1`
	}
	return outboxHas(ctx, env, `state IN ('pending', 'claimed') AND lease_owner IN (`+holder+`)`, id)
}

// outboxHas reports whether an outbox row matches the SQL condition where
// (false if the query fails, as while PostgreSQL is down).
func outboxHas(ctx context.Context, env *Env, where string, args ...any) bool {
	names, err := env.names()
	if err != nil {
		return false
	}
	var ok bool
	err = env.DB.SQL.QueryRowContext(ctx, env.q(`SELECT EXISTS (SELECT 1 FROM `+names.Table+` WHERE `+where+`)`), args...).Scan(&ok)
	return err == nil && ok
}

// waitUntil polls cond every 10ms for up to limit.
func waitUntil(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) || !sleep(ctx, 10*time.Millisecond) {
			return false
		}
	}
	return true
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
