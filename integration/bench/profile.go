package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"
)

// profile is a named set of scenarios and the sizes they run at (-profile).
type profile struct {
	name string
	// scenarios are those the profile runs; -skip leaves some of them out.
	scenarios []string
	// flags are the profile's values of flags; a flag given on the command
	// line keeps its own value.
	flags map[string]string
}

// profiles are the runs -profile names. The default is meant to take
// under ten minutes on 2 cores: it has every scenario whose figures are on
// the summary line but the peers'. River's drains run at a few thousand
// events/s at best and far less on a busy machine (one 100,000-event
// drain stopped at 36,432 after its five minutes), and Debezium needs the
// real cluster and its warm-up. prune, whose figures are its JSON object
// alone, writes 3.6 million rows.
var profiles = []profile{
	{
		name:      "default",
		scenarios: []string{"relay", "relay3", "plain", "naive", "forwarder", "dblimit", "kafkalimit", "latency", "write", "claim", "memory", "wal"},
	},
	{
		// The runs of docs/performance.md's "Against the peers", on the
		// real cluster (-broker kafka) and on kfake.
		name:      "peers",
		scenarios: []string{"relay", "relay3", "plain", "kafkalimit", "wal", "river", "debezium"},
		flags:     map[string]string{"events": "50000", "rounds": "4"},
	},
	{
		// docs/performance.md's "Large payloads": the claim check
		// against the same bytes published directly.
		name:      "large",
		scenarios: []string{"large"},
	},
	{
		// docs/performance.md's "What the relay costs PostgreSQL": the
		// drains against the plain loop, the latency scenario (writers
		// committing while the relay drains), the steady one (the same
		// against the plain loop) and the idle relays, each statement
		// counted (-statements, on the bench's own cluster).
		name:      "cost",
		scenarios: []string{"relay", "relay3", "plain", "latency", "steady", "idle"},
		flags:     map[string]string{"statements": "true", "own-cluster": "true"},
	},
	{
		name:      "all",
		scenarios: scenarioNames,
	},
}

// profileNamed returns the profile called name.
func profileNamed(name string) (profile, error) {
	for _, p := range profiles {
		if p.name == name {
			return p, nil
		}
	}
	names := make([]string, len(profiles))
	for i, p := range profiles {
		names[i] = p.name
	}
	return profile{}, fmt.Errorf("-profile: unknown profile %q (want %s)", name, strings.Join(names, ", "))
}

// runs reports whether the profile runs the scenario.
func (p profile) runs(scenario string) bool { return slices.Contains(p.scenarios, scenario) }

// apply sets the profile's flags in fs, but for those given on the command
// line (fs parsed).
func (p profile) apply(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for name, value := range p.flags {
		if given[name] {
			continue
		}
		if err := fs.Set(name, value); err != nil {
			return fmt.Errorf("-profile %s: -%s %s: %w", p.name, name, value, err)
		}
	}
	return nil
}

// profileUsage describes the profiles for -profile's help.
func profileUsage() string {
	var b strings.Builder
	b.WriteString("the scenarios to run and their sizes (-skip leaves some out, and a size flag given keeps its value):")
	for _, p := range profiles {
		fmt.Fprintf(&b, " %s: %s", p.name, strings.Join(p.scenarios, ","))
		if len(p.flags) > 0 {
			keys := make([]string, 0, len(p.flags))
			for k := range p.flags {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, " -%s %s", k, p.flags[k])
			}
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}
