package entoutboxext

import (
	_ "embed"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"
)

//go:embed entoutbox.tmpl
var templateText string

// Extension is the entc extension that adds entoutbox's methods to the
// generated code. It generates one file, entoutbox.go, in the ent package.
type Extension struct {
	entc.DefaultExtension
}

// New returns the extension. Pass it to entc.Generate:
//
//	entc.Generate("./schema", &gen.Config{}, entc.Extensions(entoutboxext.New()))
func New() *Extension { return &Extension{} }

// Templates implements entc.Extension.
func (*Extension) Templates() []*gen.Template {
	return []*gen.Template{gen.MustParse(gen.NewTemplate("entoutbox").Parse(templateText))}
}

var _ entc.Extension = (*Extension)(nil)
