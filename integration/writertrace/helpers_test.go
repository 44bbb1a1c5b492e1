package writertrace

import "github.com/txoutbox/txoutbox"

// event is the root package's test helper (writer_test.go), repeated here.
func event(aggregate string, n int) txoutbox.Event {
	e, _ := txoutbox.NewEvent("orders", "order", aggregate, "order.placed", map[string]int{"n": n})
	return e
}
