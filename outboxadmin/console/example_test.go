package console_test

import (
	"context"
	"database/sql"
	"log"
	"net/http"
	"time"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/outboxadmin"
	"github.com/txoutbox/txoutbox/outboxadmin/console"
)

// Mount the console under /admin/outbox/, behind the application's own
// authentication, and keep its chart's history sampled in the background.
func Example() {
	var db *sql.DB // your pool
	adm, err := outboxadmin.New(db, outboxadmin.Config{})
	if err != nil {
		log.Fatal(err)
	}
	con, err := console.New(adm, console.Options{Title: "orders", AllowWrites: true})
	if err != nil {
		log.Fatal(err)
	}
	go con.Run(context.Background()) //nolint:errcheck // returns nil when the context ends

	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", requireOperator(con)))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}

// Serve one console for the outbox tables of every tenant's schema: an
// index of them all, and each table's pages under
// /admin/outbox/tables/<schema>.outbox/.
func ExampleNewMulti() {
	var db *sql.DB // your pool
	// The tenants' tables, listed again every Options.DiscoverInterval
	// (relay.FindTables lists those of a relay group's schemas).
	tenants := func(ctx context.Context) ([]txoutbox.Table, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		rows, err := db.QueryContext(ctx, `SELECT schema_name FROM tenants ORDER BY 1`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var tables []txoutbox.Table
		for rows.Next() {
			var schema string
			if err := rows.Scan(&schema); err != nil {
				return nil, err
			}
			tables = append(tables, txoutbox.Table{Schema: schema})
		}
		return tables, rows.Err()
	}
	m, err := console.NewMulti(db, outboxadmin.Config{}, tenants, console.Options{Title: "shop (prod)"})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", requireOperator(m)))
	_ = http.ListenAndServe("127.0.0.1:8080", mux)
}

// requireOperator stands for the application's authentication.
func requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, _, ok := r.BasicAuth(); !ok || user != "operator" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
