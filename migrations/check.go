package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/txoutbox/txoutbox/internal/outboxsql"
)

var (
	// ErrSchemaTooOld is matched by Check's error when a version the
	// caller needs is not applied to the table, or the table does not
	// exist: run `outbox migrate up` (Migrator.Up).
	ErrSchemaTooOld = errors.New("migrations: the schema is older than needed")

	// ErrSchemaTooNew is matched by the error of Check, Up, Down and
	// Partition when the table has a version applied that the set does not
	// have: a newer txoutbox migrated it, and this one cannot tell what
	// that version changed. Run the newer release, or revert those
	// versions with its `outbox migrate down`.
	ErrSchemaTooNew = errors.New("migrations: the schema has versions this txoutbox does not know")
)

// Latest returns the set's newest version: the schema a component of this
// release that needs every version checks for (Check).
func (s Set) Latest() int {
	migs, err := s.load()
	if err != nil || len(migs) == 0 {
		// Only a Set not declared in this package; the embedded files
		// are checked by the package's tests.
		return 0
	}
	return migs[len(migs)-1].Version
}

// MySQLLatest is Latest of the set's MySQL series (Set.MySQLFS): the
// schema a MySQL component of this release that needs every version
// checks for.
func (s Set) MySQLLatest() int {
	migs, err := s.loadFor(outboxsql.MySQL)
	if err != nil || len(migs) == 0 {
		return 0
	}
	return migs[len(migs)-1].Version
}

// Check reads which versions are applied to the table, changing nothing,
// and returns an error matching ErrSchemaTooNew when one is applied that
// the set does not have, or one matching ErrSchemaTooOld when a version of
// the set up to need is not applied (or the table does not exist). need is
// the version the caller's statements need, at most the set's Latest; 0
// checks for unknown versions only. Relays, outboxadmin and the outbox
// command check the outbox at start, so that they refuse a table they
// would misread.
//
// The role needs SELECT on the version table (<table>_schema_migrations).
// A table without one was migrated by another tool from the set's files
// (see Set.FS): Check cannot tell its version, and returns nil.
func (m *Migrator) Check(ctx context.Context, need int) error {
	if latest := m.latest(); need < 0 || need > latest {
		return fmt.Errorf("migrations: check: version %d is needed; the %s set has versions 1 to %d", need, m.set.name, latest)
	}
	if m.dialect == outboxsql.MySQL {
		return m.checkMySQL(ctx, need)
	}
	var (
		tableExists, versioned, readable bool
		role                             string
	)
	args := outboxsql.SchemaTablesArgs{Table: m.tableName, Versions: m.versions}
	if err := m.db.QueryRowContext(ctx, outboxsql.SchemaTables, args.Args()...).Scan(&tableExists, &versioned, &readable, &role); err != nil {
		return fmt.Errorf("migrations: check: %w", err)
	}
	if !readable {
		return fmt.Errorf("migrations: check: role %q lacks SELECT on %s, which records the applied versions: GRANT SELECT ON %s TO %q",
			role, m.versions, m.versions, role)
	}
	if !versioned {
		if tableExists || need == 0 {
			return nil
		}
		return fmt.Errorf("%w: %s does not exist (version %d is needed): run %s", ErrSchemaTooOld, m.tableName, need, m.upCommand())
	}
	current, err := m.applied(ctx, m.db)
	if err != nil {
		return fmt.Errorf("migrations: check: %w", err)
	}
	return m.checkApplied(current, need)
}

// checkApplied is Check's verdict on the versions applied.
func (m *Migrator) checkApplied(current map[int]appliedVersion, need int) error {
	if err := m.refuseUnknown(current); err != nil {
		return err
	}
	var missing []int
	for _, mig := range m.migrations {
		if _, ok := current[mig.Version]; !ok && mig.Version <= need {
			missing = append(missing, mig.Version)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s lacks %s (version %d is needed): run %s", ErrSchemaTooOld, m.tableName, versionList(missing), need, m.upCommand())
	}
	return nil
}

// refuseUnknown fails with ErrSchemaTooNew when current holds a version
// the set does not have.
func (m *Migrator) refuseUnknown(current map[int]appliedVersion) error {
	var unknown []int
	for v := range current {
		if !m.knows(v) {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("%w: %s has %s applied; this txoutbox knows the %s schema up to version %d: run a release that knows it",
		ErrSchemaTooNew, m.tableName, versionList(unknown), m.set.name, m.latest())
}

// knows reports whether v is one of the set's versions.
func (m *Migrator) knows(v int) bool {
	return slices.ContainsFunc(m.migrations, func(mig migration) bool { return mig.Version == v })
}

// latest is the set's newest version.
func (m *Migrator) latest() int {
	if len(m.migrations) == 0 {
		return 0
	}
	return m.migrations[len(m.migrations)-1].Version
}

// upCommand is the command that migrates the set's tables.
func (m *Migrator) upCommand() string {
	if m.set == Outbox {
		return "outbox migrate up"
	}
	return "outbox migrate up --set " + m.set.name
}

// versionList names versions for a message: "version 9", "versions 9, 10, 11".
func versionList(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	if len(vs) == 1 {
		return "version " + s[0]
	}
	return "versions " + strings.Join(s, ", ")
}
