package demo

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"
)

// With no DATABASE_URL and nothing at the local address, the examples get
// an embedded PostgreSQL of their own, which serves, and which Shutdown
// stops and removes.
func TestEmbeddedPostgresWhenNoneIsReachable(t *testing.T) {
	t.Setenv("DATABASE_URL", "")
	u, err := findDatabase("postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	if embedded == nil || u != embedded.url {
		t.Fatalf("findDatabase returned %q without starting an embedded server", u)
	}
	dir := embedded.dir
	t.Cleanup(Shutdown)
	db, err := sql.Open("pgx", u)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, q := range []string{`CREATE TABLE t (v int)`, `INSERT INTO t VALUES (41)`} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRowContext(ctx, `SELECT v + 1 FROM t`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 42 {
		t.Fatalf("got %d from the embedded server", n)
	}
	db.Close()
	Shutdown()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the embedded server's directory %s is still there after Shutdown: %v", dir, err)
	}
	if err := pingURL(ctx, u); err == nil {
		t.Errorf("the embedded server still answers after Shutdown")
	}
}

// DATABASE_URL wins, and a reachable local server is used as it is.
func TestDatabaseURLPrefersWhatIsThere(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://someone@db.example:5432/app")
	if u, err := findDatabase(localURL); err != nil || u != "postgres://someone@db.example:5432/app" {
		t.Fatalf("findDatabase = %q, %v; want DATABASE_URL", u, err)
	}
	t.Setenv("DATABASE_URL", "")
	if u, err := findDatabase(localURL); err != nil || u != localURL || embedded != nil {
		t.Fatalf("findDatabase = %q, %v (embedded %v); want the local server at %s, which the tests need running", u, err, embedded != nil, localURL)
	}
}
