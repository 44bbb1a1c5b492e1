package writertrace

import (
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// newWriter and event are the root package's test helpers (writer_test.go),
// repeated here.

func newWriter(t *testing.T, db *testkit.DB) *txoutbox.Writer {
	t.Helper()
	w, err := txoutbox.NewWriter(txoutbox.WriterConfig{Table: db.Table()})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func event(aggregate string, n int) txoutbox.Event {
	e, _ := txoutbox.NewEvent("orders", "order", aggregate, "order.placed", map[string]int{"n": n})
	return e
}
