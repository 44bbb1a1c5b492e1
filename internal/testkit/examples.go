package testkit

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// SameExamples fails t unless every Example of pkgFile that shows its
// output in a "// Prints:" comment (compiled there, not run: its module
// brings no database driver) is in copyFile with "// Output:" instead,
// word for word, and copyFile has no other Example. The copies run where
// a database is at hand, so what a package's docs show is what its code
// prints.
func SameExamples(t testing.TB, pkgFile, copyFile string) {
	t.Helper()
	theirs := examples(t, pkgFile)
	ours := examples(t, copyFile)
	shown := 0
	for name, src := range theirs {
		if !strings.Contains(src, "// Prints:") {
			continue
		}
		shown++
		want := strings.ReplaceAll(src, "// Prints:", "// Output:")
		if got, ok := ours[name]; !ok {
			t.Errorf("%s's %s has no runnable copy in %s", pkgFile, name, copyFile)
		} else if got != want {
			t.Errorf("%s's %s differs from its runnable copy in %s:\n--- %s\n%s\n--- %s\n%s", pkgFile, name, copyFile, pkgFile, want, copyFile, got)
		}
	}
	if shown == 0 {
		t.Errorf("no Example of %s shows its output in a \"// Prints:\" comment", pkgFile)
	}
	for name, src := range ours {
		if theirs[name] == "" || !strings.Contains(theirs[name], "// Prints:") {
			t.Errorf("%s runs in %s but %s has no such Example with a \"// Prints:\" comment:\n%s", name, copyFile, pkgFile, src)
		}
	}
}

// examples maps each Example function of the file to its source, doc
// comment included.
func examples(t testing.TB, path string) map[string]string {
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
		if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Example") {
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
