//go:build ignore

package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/txoutbox/txoutbox/entoutbox/entoutboxext"
)

func main() {
	err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(entoutboxext.New()))
	if err != nil {
		log.Fatalf("running ent codegen: %v", err)
	}
}
