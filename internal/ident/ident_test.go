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

// ValidateQuoted accepts what PostgreSQL accepts quoted, hostile names
// included: they are only ever used through Quote.
func TestValidateQuoted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"outbox", true},
		{"tenant_sp ace", true},
		{`tenant_q"x`, true},
		{"tenant_ü", true},
		{`x"; drop table y; --`, true},
		{"a.b", true},
		{"1outbox", true},
		{"$user", true},
		{"line\nbreak", true},
		{strings.Repeat("ü", 31), true}, // 62 bytes
		{"", false},
		{strings.Repeat("ü", 32), false}, // 64 bytes
		{"nul\x00byte", false},
	} {
		err := ValidateQuoted(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("ValidateQuoted(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ValidateQuoted(%q) error %v does not match ErrInvalid", tc.name, err)
		}
	}
}

// Quote makes any name one identifier: a hostile name cannot close the
// quotes and add SQL.
func TestQuoteHostile(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		`x"; drop table y; --`: `"x""; drop table y; --"`,
		`tenant_q"x`:           `"tenant_q""x"`,
		`""`:                   `""""""`,
		"tenant_sp ace":        `"tenant_sp ace"`,
	} {
		if got := Quote(name); got != want {
			t.Errorf("Quote(%q) = %s, want %s", name, got, want)
		}
	}
}

func TestReadable(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"tenant_a":             "tenant_a",
		"Tenant_A":             "Tenant_A",
		"tenant_sp ace":        `"tenant_sp ace"`,
		`tenant_q"x`:           `"tenant_q""x"`,
		"tenant_ü":             `"tenant_ü"`,
		"a.b":                  `"a.b"`,
		"1a":                   `"1a"`,
		`x"; drop table y; --`: `"x""; drop table y; --"`,
	} {
		if got := Readable(name); got != want {
			t.Errorf("Readable(%q) = %s, want %s", name, got, want)
		}
	}
	if got := ReadableQualified("a.b", "outbox"); got != `"a.b".outbox` {
		t.Errorf("ReadableQualified = %s", got)
	}
	if got := ReadableQualified("", "outbox"); got != "outbox" {
		t.Errorf("ReadableQualified unqualified = %s", got)
	}
}
