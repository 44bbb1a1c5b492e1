package outboxtest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The outboxtest package shows these Examples with their output as a
// "Prints:" comment, and does not run them: its module brings no database
// driver. This file's copies run here; each must be the package's, with
// "Output:" for "Prints:", so that what the package's docs show is what
// the code prints.
func TestThePackagesExamplesAreTheseOnes(t *testing.T) {
	theirs := examples(t, filepath.Join("..", "..", "..", "outboxtest", "example_test.go"))
	ours := examples(t, "example_test.go")
	if len(theirs) == 0 {
		t.Fatal("no Examples found in outboxtest/example_test.go")
	}
	for name, src := range theirs {
		want := strings.ReplaceAll(src, "// Prints:", "// Output:")
		if got, ok := ours[name]; !ok {
			t.Errorf("outboxtest's %s has no runnable copy here", name)
		} else if got != want {
			t.Errorf("outboxtest's %s differs from its runnable copy here:\n--- theirs\n%s\n--- ours\n%s", name, want, got)
		}
	}
	for name := range ours {
		if _, ok := theirs[name]; !ok {
			t.Errorf("%s runs here but is not in outboxtest's Examples", name)
		}
	}
}

// examples maps each Example function of the file to its source, doc
// comment and body.
func examples(t *testing.T, path string) map[string]string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || !strings.HasPrefix(fn.Name.Name, "Example") {
			continue
		}
		start := fset.Position(fn.Pos()).Offset
		if fn.Doc != nil {
			start = fset.Position(fn.Doc.Pos()).Offset
		}
		out[fn.Name.Name] = string(src[start:fset.Position(fn.End()).Offset])
	}
	return out
}
