package relay

import (
	"errors"
	"strings"
	"testing"
)

// A server whose commits may be lost in a crash is refused with
// ErrInvalidConfig, naming the setting and docs/mysql.md; 1 passes.
func TestCheckDurable(t *testing.T) {
	t.Parallel()
	if err := checkDurable("1"); err != nil {
		t.Fatalf("innodb_flush_log_at_trx_commit 1: %v", err)
	}
	for _, v := range []string{"0", "2"} {
		err := checkDurable(v)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "innodb_flush_log_at_trx_commit is "+v) ||
			!strings.Contains(err.Error(), "docs/mysql.md") {
			t.Fatalf("innodb_flush_log_at_trx_commit %s: %v", v, err)
		}
	}
}
