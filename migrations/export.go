package migrations

import (
	"fmt"
	"strings"
)

// File is one migration file for another migration tool.
type File struct {
	Name string
	Body string
}

// Export formats.
const (
	// FormatGolangMigrate is NNNN_name.up.sql and NNNN_name.down.sql
	// pairs, as golang-migrate and Atlas (format=golang-migrate) read them.
	FormatGolangMigrate = "golang-migrate"
	// FormatGoose is one NNNN_name.sql per version with goose's
	// "-- +goose Up" and "-- +goose Down" sections; goose cannot read up
	// and down halves from separate files.
	FormatGoose = "goose"
)

// Export returns the set's migrations as files for another migration tool,
// with the tables renamed to the configured Table.Name. Table.Schema is not
// written into the files: run them with the schema as the connection's
// search_path, as those tools do.
func (m *Migrator) Export(format string) ([]File, error) {
	var out []File
	for _, mig := range m.migrations {
		up := strings.TrimSpace(m.rename(mig.up)) + "\n"
		down := strings.TrimSpace(m.rename(mig.down)) + "\n"
		base := fmt.Sprintf("%04d_%s", mig.Version, mig.Name)
		switch format {
		case FormatGolangMigrate:
			out = append(out, File{base + ".up.sql", up}, File{base + ".down.sql", down})
		case FormatGoose:
			out = append(out, File{base + ".sql", "-- +goose Up\n" + up + "\n-- +goose Down\n" + down})
		default:
			return nil, fmt.Errorf("migrations: unknown export format %q (want %s or %s)", format, FormatGolangMigrate, FormatGoose)
		}
	}
	return out, nil
}
