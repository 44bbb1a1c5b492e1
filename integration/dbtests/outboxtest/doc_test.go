package outboxtest_test

import (
	"path/filepath"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// outboxtest's Examples show their output in a "Prints:" comment, and its
// module does not run them; this package's copies run, and must be theirs.
func TestThePackagesExamplesAreTheseOnes(t *testing.T) {
	testkit.SameExamples(t, filepath.Join("..", "..", "..", "outboxtest", "example_test.go"), "example_test.go")
}
