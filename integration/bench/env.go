package main

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/kafkatest"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// benchDatabase holds every scenario's schema, so a run never touches
// application data on the server.
const benchDatabase = "txoutbox_bench"

// env is what every scenario shares: the database, the broker process and
// a scratch directory.
type env struct {
	// dbURL is the bench database on the -database-url server; with -db
	// mariadb the server's URL, on which each scenario creates a database
	// of its own.
	dbURL string
	// mysql: the server is MySQL or MariaDB (-db mariadb).
	mysql   bool
	brokers []string // the kfake broker process's address, or the real cluster's
	// real: brokers are the Apache Kafka cluster of .ci/services, whose
	// topics are made anew before each drain (it creates none on use).
	real bool
	// brokerPids and postmaster are the processes whose CPU the drain
	// scenarios read in /proc (none, 0: not on this host).
	brokerPids []int
	postmaster int
	// mysqld is the MySQL server's process (0: not measurable here).
	mysqld int
	tmp    string // scratch directory for built binaries and profiles
	opts   options
	// topics are the topics the run made on the real cluster, which
	// dropTopics deletes at its end.
	topics []string
}

// schemaDB is one scenario's fresh, migrated schema, dropped by close; on
// MySQL a database of its own.
type schemaDB struct {
	SQL *sql.DB
	// URL is the same database with search_path set to Schema; on MySQL
	// the database's mysql:// URL, and DSN the driver's form of it.
	URL, DSN string
	Schema   string
	Table    txoutbox.Table
	Names    outboxsql.Names
	ts       *testkit.Schema
	// mysql: the database is MySQL's, dropped by drop.
	mysql bool
	drop  func(context.Context) error
	// scheduled counts the rows insertScheduled wrote, which no drain
	// waits for.
	scheduled int
}

// newSchema creates a fresh schema named after the scenario and migrates
// the outbox into it.
func (e *env) newSchema(ctx context.Context, scenario string) (*schemaDB, error) {
	if e.mysql {
		return e.newMySQLSchema(ctx, scenario)
	}
	ts, err := testkit.CreateSchema(ctx, e.dbURL, testkit.SchemaName("bench_"+scenario), true)
	if err != nil {
		return nil, err
	}
	s := &schemaDB{SQL: ts.SQL, URL: ts.URL, Schema: ts.Name, Table: ts.Table(), ts: ts}
	// As relay.New's documentation asks: room for the relay's concurrent
	// loops (and for 3 relays sharing this pool), so no scenario pays for
	// reconnecting.
	s.SQL.SetMaxIdleConns(24)
	if s.Names, err = outboxsql.NamesFor(s.Table.Schema, s.Table.Name); err != nil {
		s.close()
		return nil, err
	}
	if e.opts.partitionSize > 0 {
		m, err := migrations.New(s.SQL, migrations.Config{Table: s.Table})
		if err == nil {
			err = m.Partition(ctx, e.opts.partitionSize)
		}
		if err == nil && e.opts.partitionsAhead {
			err = partitionsAhead(ctx, s, e.opts.partitionSize, int64(e.opts.events))
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("partition the outbox: %w", err)
		}
	}
	return s, nil
}

// topic returns name after making sure it is an empty topic with the
// bench's partitions: on kfake topics are made on first use; on the real
// cluster the topic of an earlier run is deleted and made again, with
// three replicas.
func (e *env) topic(ctx context.Context, name string) (string, error) {
	if !e.real {
		return name, nil
	}
	return name, e.recreateTopic(ctx, name, nil)
}

// recreateTopic makes name an empty topic of the real cluster with the
// bench's partitions, three replicas and configs, and records it for
// dropTopics.
func (e *env) recreateTopic(ctx context.Context, name string, configs map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if !slices.Contains(e.topics, name) {
		e.topics = append(e.topics, name)
	}
	return kafkatest.RecreateTopic(ctx, e.brokers, name, int32(e.opts.partitions), 3, configs)
}

// dropTopics deletes the topics the run made on the real cluster, so that
// it leaves none of its records there: a cluster keeps them, and a broker
// restarted after a crash recovers every partition it holds, so a run's
// leftovers would slow every later restart of a node (the fault tests').
func (e *env) dropTopics() {
	if len(e.topics) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kafkatest.DeleteTopics(ctx, e.brokers, e.topics...); err != nil {
		logf("delete the run's topics: %v", err)
		return
	}
	logf("deleted the topics the run made (%d)", len(e.topics))
	e.topics = nil
}

// close drops the schema and closes the pool.
func (s *schemaDB) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	drop := s.drop
	if drop == nil {
		drop = s.ts.Drop
	}
	if err := drop(ctx); err != nil {
		logf("%v", err)
	}
}

// findPostmaster looks up the bench database's server among this host's
// processes, for the drain scenarios' CPU figures.
func (e *env) findPostmaster(ctx context.Context) error {
	db, err := sql.Open("pgx", e.dbURL)
	if err != nil {
		return err
	}
	defer db.Close()
	e.postmaster, err = postmasterPID(ctx, db)
	return err
}

// benchCluster is the cluster -own-cluster runs on, on a port of its own:
// the tests' quiet cluster (testkit.QuietCluster) may run meanwhile.
var benchCluster = testkit.Cluster{Version: "15", Name: "bench", Port: 5441}

// startOwnCluster creates and starts the bench's own cluster, and returns
// its URL and a function that stops it again if it was down before.
func startOwnCluster(ctx context.Context) (stop func(), url string, err error) {
	wasUp := benchCluster.Running(ctx)
	logf("PostgreSQL cluster %s/%s on port %d", benchCluster.Version, benchCluster.Name, benchCluster.Port)
	if url, err = benchCluster.Ensure(ctx); err != nil {
		return nil, "", fmt.Errorf("-own-cluster: %w", err)
	}
	return func() {
		if wasUp {
			return
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := benchCluster.Stop(sctx); err != nil {
			logf("stop the bench cluster: %v", err)
		}
	}, url, nil
}

// partitionsAhead creates the partitions up to upTo ids, as the relays'
// rounds would while writers wrote them.
func partitionsAhead(ctx context.Context, s *schemaDB, size, upTo int64) error {
	t := partitions.Table{Names: s.Names, Schema: s.Table.Schema, Name: cmp.Or(s.Table.Name, outboxsql.TableNameDefault)}
	to := partitions.Timeouts{Lock: partitions.LockTimeout, Statement: time.Minute}
	for maxID := int64(0); maxID <= upTo; maxID += size {
		leaves, err := partitions.List(ctx, s.SQL, s.Names)
		if err != nil {
			return err
		}
		if _, err := partitions.CreateAhead(ctx, s.SQL, t, leaves, maxID, to); err != nil {
			return err
		}
	}
	return nil
}
