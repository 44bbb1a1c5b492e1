package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

// Prune deletes the records of events processed more than olderThan ago,
// by the database clock, oldest first, in statements of at most
// Config.PruneBatch rows, until a statement deletes fewer than that or ctx
// ends. It returns how many rows it deleted, also when it fails part way.
//
// Pass a *sql.DB, so that each batch commits on its own and holds its locks
// briefly. Prune is safe to run from several processes at once.
//
// olderThan is how long an event id is remembered, and it must cover every
// way the event can be delivered again: after an id is pruned, a redelivery
// of its event is processed a second time. Keep it at least the sum of
//   - the broker's retention (a consumer group rewound to the earliest
//     offset, or a new consumer of the same name, rereads that far back),
//   - the outbox's retention of published rows plus the relay's longest
//     retry horizon (an operator re-driving old rows republishes them),
//   - and the longest time a consumer may be stopped while its messages wait.
//
// For example, 7 days of Kafka retention and 3 days of outbox retention
// make a window of at least 10 days; a generous margin costs only disk (a
// few tens of bytes per event and consumer).
func (ib *Inbox) Prune(ctx context.Context, db txoutbox.SQLExecer, olderThan time.Duration) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("inbox: prune: olderThan must be positive, got %v", olderThan)
	}
	if db == nil {
		return 0, errors.New("inbox: prune: the database is nil")
	}
	var total int64
	for {
		args := []any{olderThan.Seconds(), ib.pruneBatch}
		if ib.mysql {
			args = outboxsql.MySQLInboxPruneArgs{OlderThan: olderThan, Limit: ib.pruneBatch}.Args()
		}
		res, err := db.ExecContext(ctx, ib.prune, args...)
		if err != nil {
			return total, fmt.Errorf("inbox: prune %s: %w", ib.table, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return total, fmt.Errorf("inbox: prune %s: rows affected: %w", ib.table, err)
		}
		total += n
		if n < int64(ib.pruneBatch) {
			return total, nil
		}
	}
}
