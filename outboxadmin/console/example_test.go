package console_test

import (
	"context"
	"database/sql"
	"log"
	"net/http"

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
