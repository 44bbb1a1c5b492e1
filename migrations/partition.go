package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/partitions"
)

// PartitionSizeDefault is a size to give Partition, in ids, and the one
// `outbox migrate partition` uses when none is given: at 10 million events
// a day, a partition every two to three hours.
const PartitionSizeDefault = 1_000_000

// partitionVersion is the schema version Partition needs.
const partitionVersion = 9

// Partition turns the outbox table into a table partitioned by ranges of
// size ids, if it is not one already, and creates the partitions missing
// ahead of the writers. It suits a new outbox as well as one in use:
// writers and relays run on, waiting only for one short transaction (under
// a lock_timeout, retried) that puts a partitioned table in the table's
// place, with the table as its first partition. Relays then create the
// partitions ahead and drop those past retention in their prune round;
// calling Partition again from a job does the former too. It needs the
// outbox schema at version 9 or later, with no version it does not know
// (ErrSchemaTooNew), and the role owning the table, and fails for a table
// in a publication (see docs/partitions.md, which describes every step).
func (m *Migrator) Partition(ctx context.Context, size int64) error {
	if m.dialect == outboxsql.MySQL {
		return errors.New("migrations: partition: partitioned outboxes are PostgreSQL's; MySQL's are not supported")
	}
	if m.set != Outbox {
		return errors.New("migrations: partition: only the outbox set is partitioned")
	}
	if size <= 0 {
		return fmt.Errorf("migrations: partition: the size is %d ids; want a positive number", size)
	}
	st, err := m.Status(ctx)
	if err != nil {
		return fmt.Errorf("migrations: partition: %w", err)
	}
	for _, s := range st {
		if s.Unknown {
			return fmt.Errorf("migrations: partition: %w: version %d (%s) is applied; this txoutbox knows the outbox schema up to version %d",
				ErrSchemaTooNew, s.Version, s.Name, m.latest())
		}
		if s.AppliedAt == nil && s.Version <= partitionVersion {
			return fmt.Errorf("migrations: partition: schema version %d is not applied; run migrate up first", s.Version)
		}
	}
	names, err := outboxsql.NamesFor(m.schema, m.table)
	if err != nil {
		return fmt.Errorf("migrations: partition: %w", err)
	}
	t := partitions.Table{Names: names, Schema: m.schema, Name: m.table}
	to := partitions.Timeouts{Lock: partitions.LockTimeout, Statement: time.Minute}
	if err := partitions.Convert(ctx, m.db, t, size, to, 20); err != nil {
		return fmt.Errorf("migrations: partition: %w", err)
	}
	return nil
}
