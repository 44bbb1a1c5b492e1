// Package gormoutbox runs the Examples of package gormoutbox that print, on
// PostgreSQL, and checks that they are the package's own. The gormoutbox
// module's Examples import no database driver and are compiled, not run,
// so that a service gets only its own driver (see docs/development.md,
// "Modules").
package gormoutbox
