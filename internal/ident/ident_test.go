package ident

import (
	"errors"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"outbox", true},
		{"Outbox_2", true},
		{"_x", true},
		{strings.Repeat("a", 63), true},
		{"", false},
		{strings.Repeat("a", 64), false},
		{"1outbox", false},
		{"x; drop table y", false},
		{`x"y`, false},
		{"a.b", false},
		{"ümlaut", false},
	} {
		err := Validate(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("Validate(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%q) error %v does not match ErrInvalid", tc.name, err)
		}
	}
}

func TestQualified(t *testing.T) {
	t.Parallel()
	if got := Qualified("", "outbox"); got != `"outbox"` {
		t.Errorf("got %s", got)
	}
	if got := Qualified("app", "outbox"); got != `"app"."outbox"` {
		t.Errorf("got %s", got)
	}
	if got := Quote(`a"b`); got != `"a""b"` {
		t.Errorf("got %s", got)
	}
}
