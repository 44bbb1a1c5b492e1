package relay

import (
	"strings"
	"testing"
)

// A SchemaPattern matches as path.Match does, but "*" and "?" match any
// character, "/" too: every name PostgreSQL allows can be selected.
func TestSchemaPatternMatchesAnyName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, name string
		want          bool
	}{
		{"tenant_*", "tenant_a", true},
		{"tenant_*", "tenant_sp ace", true},
		{"tenant_*", `tenant_q"x`, true},
		{"tenant_*", "tenant_ü", true},
		{"tenant_*", "tenant_a/b", true},
		{"tenant_*", "tenant_a\nb", true},
		{"tenant_*", `tenant_x"; drop table y; --`, true},
		{"tenant_*", "tenant_", true},
		{"tenant_*", "other_a", false},
		{"tenant_?", "tenant_ü", true},
		{"tenant_?", "tenant_/", true},
		{"tenant_?", "tenant_ab", false},
		{"tenant_[a-c]", "tenant_b", true},
		{"tenant_[a-c]", "tenant_d", false},
		{"tenant_[^a-c]", "tenant_d", true},
		{"tenant_[^a-c]", "tenant_/", true},
		{"tenant_[^a-c]", "tenant_a", false},
		{"tenant_[!x]", "tenant_!", true}, // a class of ! and x, as in path.Match
		{"tenant_[ü]", "tenant_ü", true},
		{`tenant_[\]\-]`, "tenant_]", true},
		{`tenant_[\]\-]`, "tenant_-", true},
		{`tenant_\*`, "tenant_*", true},
		{`tenant_\*`, "tenant_a", false},
		{"tenant.a", "tenant.a", true},
		{"tenant.a", "tenantxa", false}, // no regular expression leaks through
		{"a+b", "a+b", true},
		{"a+b", "aab", false},
		{"(a)", "(a)", true},
		{"tenant_a", "tenant_ab", false},
		{"tenant_a", "xtenant_a", false},
	} {
		re, err := compilePattern(tc.pattern)
		if err != nil {
			t.Errorf("compilePattern(%q): %v", tc.pattern, err)
			continue
		}
		if got := re.MatchString(tc.name); got != tc.want {
			t.Errorf("pattern %q on %q = %v, want %v", tc.pattern, tc.name, got, tc.want)
		}
	}
}

func TestSchemaPatternErrors(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"tenant_[", "tenant_[]", "tenant_[^]", "tenant_[a-", "tenant_[z-a]", `tenant_\`, "tenant_[-]", "tenant_[a"} {
		_, err := compilePattern(p)
		if err == nil {
			t.Errorf("compilePattern(%q) accepted a bad pattern", p)
			continue
		}
		if !strings.Contains(err.Error(), p) {
			t.Errorf("compilePattern(%q) = %v; want the pattern named", p, err)
		}
	}
}
