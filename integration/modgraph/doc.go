// Package modgraph proves what each library package brings into a user's
// module graph. Its test builds, for each case, a throwaway module whose
// main.go imports that package alone, with every txoutbox module replaced by
// its directory in this checkout, runs `go mod tidy` and `go list -m all`
// outside the workspace (GOWORK=off), and fails if a module outside the
// case's allowed list shows up. The lists are docs/development.md's "What each
// package brings". It needs the module proxy (or a warm module cache).
package modgraph
