// Package demo is the plumbing the examples share, so each example shows
// only what a user of its integration writes: a fresh schema with the
// outbox migrated (a database of its own on MySQL), a broker
// (KAFKA_BROKERS, or an embedded one), a running relay, and a consumer
// that prints what arrived.
package demo

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql" // the "mysql" database/sql driver
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/mysqldsn"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/relay"
	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

// Outbox is an example's database: a pool on a schema of its own, and the
// outbox table there.
type Outbox struct {
	// DB is a pool whose connections use the example's schema: as their
	// search_path on PostgreSQL, as their database on MySQL.
	DB *sql.DB
	// Dialect is the database's: what the Writer needs told, and GORM and
	// ent their dialect.
	Dialect txoutbox.Dialect
	// Table is the outbox table: in the example's schema on PostgreSQL,
	// unqualified on MySQL (where a schema is a database: the
	// connection's).
	Table txoutbox.Table
}

// Fresh drops the example's schema name at databaseURL and creates it
// empty, so that every run shows the same thing, and returns a pool that
// uses it. databaseURL is PostgreSQL's, or MySQL's or MariaDB's as a
// mysql:// (or mariadb://) URL; on MySQL the schema is a database of the
// example's own on that server, which the URL's user must be allowed to
// create.
func Fresh(ctx context.Context, databaseURL, name string) (*Outbox, error) {
	if mysqldsn.IsURL(databaseURL) {
		return freshMySQL(ctx, databaseURL, name)
	}
	admin, err := sql.Open("pgx", databaseURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	for _, stmt := range []string{"DROP SCHEMA IF EXISTS " + ident.Quote(name) + " CASCADE", "CREATE SCHEMA " + ident.Quote(name)} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("reset schema %s (is PostgreSQL running at %s?): %w", name, redact(databaseURL), err)
		}
	}
	u, err := testkit.SearchPathURL(databaseURL, name)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("pgx", u)
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(10) // the relay's loops use up to eight connections at once
	return &Outbox{DB: db, Dialect: txoutbox.PostgreSQL, Table: txoutbox.Table{Schema: name}}, nil
}

// freshMySQL is Fresh on MySQL: database name, recreated, on the server
// of databaseURL.
func freshMySQL(ctx context.Context, databaseURL, name string) (*Outbox, error) {
	dsn, err := mysqldsn.FromURL(databaseURL)
	if err != nil {
		return nil, err
	}
	admin, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	for _, stmt := range []string{"DROP DATABASE IF EXISTS " + outboxsql.MySQLQuote(name), "CREATE DATABASE " + outboxsql.MySQLQuote(name)} {
		if _, err := admin.ExecContext(ctx, stmt); err != nil {
			return nil, fmt.Errorf("reset database %s (is MySQL running at %s, and may its user create databases?): %w", name, redact(databaseURL), err)
		}
	}
	u, err := url.Parse(databaseURL)
	if err != nil {
		return nil, err
	}
	u.Path = "/" + name
	if dsn, err = mysqldsn.FromURL(u.String()); err != nil {
		return nil, err
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, err
	}
	db.SetMaxIdleConns(10)
	return &Outbox{DB: db, Dialect: txoutbox.MySQL}, nil
}

// Schema is Fresh with the outbox migrated into the schema.
func Schema(ctx context.Context, databaseURL, name string) (*Outbox, error) {
	o, err := Fresh(ctx, databaseURL, name)
	if err != nil {
		return nil, err
	}
	m, err := migrations.New(o.DB, migrations.Config{Table: o.Table})
	if err == nil {
		_, err = m.Up(ctx)
	}
	if err != nil {
		o.DB.Close()
		return nil, err
	}
	return o, nil
}

// redact is a database URL without its password, for messages.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}

// Brokers returns KAFKA_BROKERS, or starts an embedded Kafka-protocol broker
// (kfake) on a loopback port and returns its address; stop shuts it down.
func Brokers() (brokers []string, stop func(), err error) {
	if brokers = strings.FieldsFunc(os.Getenv("KAFKA_BROKERS"), func(r rune) bool { return r == ',' }); len(brokers) > 0 {
		return brokers, func() {}, nil
	}
	cluster, err := kafkatest.Start(kfake.DefaultNumPartitions(3))
	if err != nil {
		return nil, nil, err
	}
	fmt.Printf("no KAFKA_BROKERS: started an embedded Kafka-protocol broker at %s\n", strings.Join(cluster.ListenAddrs(), ","))
	return cluster.ListenAddrs(), cluster.Close, nil
}

// StartRelay runs a relay for table on brokers until stop is called; stop
// waits for its clean shutdown, which records every acknowledgement.
func StartRelay(ctx context.Context, db *sql.DB, table txoutbox.Table, brokers []string) (r *relay.Relay, stop func() error, err error) {
	pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})
	if err != nil {
		return nil, nil, err
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err = relay.New(db, pub, relay.Config{Table: table, Logger: quiet})
	if err != nil {
		pub.Close()
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	return r, func() error {
		cancel()
		err := <-done
		pub.Close()
		return err
	}, nil
}

// Record is one event as a consumer read it.
type Record struct {
	Key, EventType, EventID string
	Value                   []byte
}

// Consume reads the records published to topic since the given time with an
// independent franz-go client, until it has want records, or fails after 30
// seconds. Skipping records older than since skips what earlier runs left
// on a real cluster.
func Consume(ctx context.Context, brokers []string, topic string, since time.Time, want int) ([]Record, error) {
	if want <= 0 {
		return nil, nil
	}
	deadline, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out []Record
	err := kafkatest.Consume(deadline, brokers, []string{topic}, 0, func(rec *kgo.Record) bool {
		if !rec.Timestamp.Before(since.Add(-time.Second)) {
			out = append(out, Record{Key: string(rec.Key), Value: rec.Value,
				EventType: kafkatest.Header(rec, txoutbox.HeaderEventType), EventID: kafkatest.Header(rec, txoutbox.HeaderEventID)})
		}
		return len(out) < want
	})
	if err != nil {
		return out, fmt.Errorf("read %d of %d events: %w", len(out), want, err)
	}
	return out, nil
}

// PrintByKey prints records grouped by key, in the order each key's records
// arrived: the order a consumer of that key sees.
func PrintByKey(topic, keyName string, records []Record) {
	byKey := map[string][]Record{}
	for _, r := range records {
		byKey[r.Key] = append(byKey[r.Key], r)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fmt.Printf("a consumer of topic %q read, by key (%s):\n", topic, keyName)
	for _, k := range keys {
		for _, r := range byKey[k] {
			fmt.Printf("  %s %s: %s %s\n", keyName, k, r.EventType, r.Value)
		}
	}
}

// RelayAndPrint shows the outbox at work: it counts the pending events in
// o's table, runs a relay on KAFKA_BROKERS (or an embedded broker) until a
// consumer of topic has read them all, and prints them grouped by key.
// since is when the example started, to skip older records of a real
// cluster.
func RelayAndPrint(ctx context.Context, o *Outbox, topic, keyName string, since time.Time) error {
	names, err := outboxsql.NamesForDialect(outboxsql.Dialect(o.Dialect), o.Table.Schema, o.Table.Name)
	if err != nil {
		return err
	}
	var pending int
	if err := o.DB.QueryRowContext(ctx, `SELECT count(*) FROM `+names.Table+` WHERE state = 'pending'`).Scan(&pending); err != nil {
		return err
	}
	fmt.Printf("outbox: %d pending events\n", pending)

	brokers, stopBroker, err := Brokers()
	if err != nil {
		return err
	}
	defer stopBroker()
	_, stopRelay, err := StartRelay(ctx, o.DB, o.Table, brokers)
	if err != nil {
		return err
	}
	defer stopRelay() //nolint:errcheck // the records read are the result
	records, err := Consume(ctx, brokers, topic, since, pending)
	if err != nil {
		return err
	}
	PrintByKey(topic, keyName, records)
	return nil
}
