package walrelay

import (
	"errors"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox"
)

// A table in a schema whose name is not plain is one a WAL relay can
// stream, under a publication and a slot named for it: the default names,
// derived from the schema's, are refused with what to set instead.
func TestConfigSchemaNotPlainNeedsNames(t *testing.T) {
	t.Parallel()
	table := txoutbox.Table{Schema: `tenant_q"x; drop table y; --`}
	err := Config{Table: table}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "set Publication and Slot") {
		t.Fatalf("default names for schema %q: %v; want ErrInvalidConfig saying to set Publication and Slot", table.Schema, err)
	}
	if err := (Config{Table: table, Publication: "txoutbox_tenant_qx", Slot: "txoutbox_tenant_qx"}).Validate(); err != nil {
		t.Fatalf("with Publication and Slot set: %v", err)
	}
}
