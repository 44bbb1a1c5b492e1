package engines_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/txoutbox/txoutbox/internal/mysqlclaim"
)

// The claim's lease and the mark rewrite a row in place (MySQL schema
// version 3): claiming and then marking 1,000 rows just inserted, which
// InnoDB packed into full pages of the clustered index, adds no page to
// it. A lease that grows the rows, as version 2's did (its lease columns
// were NULL until the claim), splits most of those pages: with a lease
// owner that grows by its 16 bytes, this test's 13 pages became 24.
//
// The counter is the table's clustered-index pages in the buffer pool
// (information_schema.INNODB_BUFFER_PAGE, which MariaDB 10.11 and MySQL 8
// have), read just after a scan of the primary key brought every page in:
// exact, and of this test's table alone. The server's redo bytes and page
// split counters (INNODB_METRICS' index_page_splits, off by default) are
// the whole server's, where other tests write at the same time.
func TestMySQLLeaseAndMarkDoNotGrowRows(t *testing.T) {
	t.Parallel()
	b := setupMySQLClaim(t)
	b.register(t, "r1")
	var ids []int64
	for i := range 10 {
		ids = append(ids, b.write(t, fmt.Sprint("agg-", i), 100)...)
	}
	pages := func() int {
		t.Helper()
		if n := mustColumn[int](t, b.db, `SELECT COUNT(*) FROM outbox FORCE INDEX (PRIMARY) WHERE created_at > '1000-01-01'`)[0]; n != len(ids) {
			t.Fatalf("%d rows, want %d", n, len(ids))
		}
		return mustColumn[int](t, b.db, "SELECT COUNT(*) FROM information_schema.INNODB_BUFFER_PAGE "+
			"WHERE TABLE_NAME = CONCAT('`', DATABASE(), '`.`outbox`') AND INDEX_NAME = 'PRIMARY'")[0]
	}
	inserted := pages()
	if inserted < 10 {
		t.Fatalf("1,000 rows in %d pages: the counter counts nothing", inserted)
	}

	c := b.claim(t, "r1", len(ids))
	if len(c.Rows) != len(ids) {
		t.Fatalf("claimed %d rows, want %d", len(c.Rows), len(ids))
	}
	leased := pages()
	k, err := mysqlclaim.Mark(context.Background(), b.db, b.names, "r1", c.Version, claimedIDs(c))
	if err != nil || k != int64(len(ids)) {
		t.Fatalf("Mark = %d, %v; want %d", k, err, len(ids))
	}
	marked := pages()
	t.Logf("clustered index pages: %d inserted, %d leased, %d marked", inserted, leased, marked)
	if leased != inserted || marked != inserted {
		t.Fatalf("clustered index pages: %d inserted, %d leased, %d marked; the lease or the mark grew the rows", inserted, leased, marked)
	}
}
