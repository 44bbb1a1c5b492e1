package entoutboxext_test

import (
	"testing"

	"github.com/txoutbox/txoutbox/entoutbox/entoutboxext"
)

func TestTemplateParses(t *testing.T) {
	ts := entoutboxext.New().Templates()
	if len(ts) != 1 || ts[0].Lookup("entoutbox") == nil {
		t.Fatalf("templates = %v, want one defining \"entoutbox\"", ts)
	}
}
