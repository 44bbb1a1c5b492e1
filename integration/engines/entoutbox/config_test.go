package entoutbox_test

import (
	"context"
	"errors"
	"testing"

	"entgo.io/ent"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/entoutbox"
)

func TestMixinValidate(t *testing.T) {
	t.Parallel()
	events := func(context.Context, entoutbox.Change) ([]txoutbox.Event, error) { return nil, nil }
	for _, tc := range []struct {
		mx   entoutbox.Mixin
		want string
	}{
		{entoutbox.Mixin{}, "entoutbox: Mixin has neither ChangeEvents nor Events, so it would record nothing"},
		{entoutbox.Mixin{ChangeEvents: true}, "entoutbox: Mixin.ChangeEvents needs a Topic"},
		{entoutbox.Mixin{Events: events, Writer: txoutbox.WriterConfig{Table: txoutbox.Table{Name: "x; drop table y"}}},
			`entoutbox: Mixin.Writer: txoutbox: invalid table name: name: `},
		{entoutbox.Mixin{Topic: "orders", ChangeEvents: true}, ""},
		{entoutbox.Mixin{Events: events}, ""},
	} {
		err := tc.mx.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.mx, err)
		case tc.want != "" && (err == nil || len(err.Error()) < len(tc.want) || err.Error()[:len(tc.want)] != tc.want):
			t.Errorf("%+v: err = %v, want prefix %q", tc.mx, err, tc.want)
		}
	}
}

// fakeMutation is a mutation of code generated without entoutbox's
// extension; only Op and Type are called before the hook refuses it.
type fakeMutation struct{ ent.Mutation }

func (fakeMutation) Op() ent.Op       { return ent.OpCreate }
func (fakeMutation) Type() string     { return "Order" }
func (fakeMutation) Fields() []string { return nil }

var mustNotRun = ent.MutateFunc(func(context.Context, ent.Mutation) (ent.Value, error) {
	return nil, errors.New("the mutation ran")
})

func TestHookRefusesCodeWithoutExtension(t *testing.T) {
	t.Parallel()
	hook := entoutbox.Mixin{Topic: "orders", ChangeEvents: true}.Hooks()[0]
	_, err := hook(mustNotRun).Mutate(context.Background(), fakeMutation{})
	if !errors.Is(err, entoutbox.ErrNotGenerated) {
		t.Fatalf("err = %v, want ErrNotGenerated", err)
	}
	want := "entoutbox: create Order: entoutbox: generated code lacks entoutbox's methods; add entc.Extensions(entoutboxext.New()) to entc.go and run go generate (mutation type entoutbox_test.fakeMutation)"
	if err.Error() != want {
		t.Errorf("err = %q\nwant %q", err, want)
	}
}

func TestInvalidMixinFailsMutations(t *testing.T) {
	t.Parallel()
	hook := entoutbox.Mixin{ChangeEvents: true}.Hooks()[0]
	_, err := hook(mustNotRun).Mutate(context.Background(), fakeMutation{})
	want := "entoutbox: Order mutation: entoutbox: Mixin.ChangeEvents needs a Topic"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %q", err, want)
	}
}
