// Package docsnippets compiles every Go code block of the README and of
// docs/, so a block that drifts from the API fails the test suite as an
// Example would. A block is a fragment of an application: the test gives
// it the names the prose around it introduces (a db, a tx, an order) from
// a table keyed by the block's first line, which a new block must join.
package docsnippets
