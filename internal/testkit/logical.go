package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"
	"time"
)

// walLevel asks the shared server its wal_level once per test binary.
var walLevel = sync.OnceValues(func() (string, error) {
	db, err := sql.Open("pgx", ServerURL())
	if err != nil {
		return "", err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var level string
	if err := db.QueryRowContext(ctx, `SHOW wal_level`).Scan(&level); err != nil {
		return "", fmt.Errorf("SHOW wal_level: %w", err)
	}
	return level, nil
})

// RequireLogical fails the test at once unless the shared server decodes
// its WAL (wal_level = logical), as the WAL relay's tests need: on a stock
// server each of them would otherwise wait out its timeout before failing.
func RequireLogical(t testing.TB) {
	t.Helper()
	level, err := walLevel()
	if err != nil {
		t.Fatalf("testkit: the PostgreSQL server at %s: %v (start it with: bash .ci/services)", ServerURL(), err)
	}
	if level != "logical" {
		t.Fatalf("testkit: the PostgreSQL server at %s has wal_level = %s; the WAL relay's tests need logical "+
			"(bash .ci/services sets it, or ALTER SYSTEM SET wal_level = logical and restart the server)", ServerURL(), level)
	}
}
