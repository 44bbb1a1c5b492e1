package outboxadmin_test

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

// A health check: fail when the outbox lags, whatever the relays report
// about themselves.
func ExampleAdmin_Status() {
	var db *sql.DB // your pool
	adm, err := outboxadmin.New(db, outboxadmin.Config{})
	if err != nil {
		panic(err)
	}
	st, err := adm.Status(context.Background())
	if err != nil {
		panic(err)
	}
	if st.Lag > time.Minute {
		fmt.Printf("outbox lags %s behind with %d events\n", st.Lag, st.Backlog)
	}
}

// Re-drive every dead event of one topic once its consumer is fixed.
func ExampleAdmin_Retry() {
	var db *sql.DB // your pool
	adm, err := outboxadmin.New(db, outboxadmin.Config{})
	if err != nil {
		panic(err)
	}
	retried, err := adm.Retry(context.Background(), outboxadmin.Filter{Topic: "payments"}, false)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d events pending again\n", len(retried))
}
