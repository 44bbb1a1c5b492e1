package modgraph

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/internal/testkit"
)

// base is what every case brings: the root module (uuid, the OTel API)
// and what those modules' own go.mod files require, test libraries
// included (minimal version selection reads whole go.mod files).
var base = []string{
	"github.com/txoutbox/txoutbox",
	"github.com/google/uuid",
	"go.opentelemetry.io/otel", "go.opentelemetry.io/otel/trace", "go.opentelemetry.io/otel/metric",
	"go.opentelemetry.io/otel/log", "go.opentelemetry.io/auto/sdk",
	"github.com/rogpeppe/go-internal", // auto/sdk's go.mod: the writer uses the global OTel propagator
	"github.com/go-logr/logr", "github.com/go-logr/stdr", "github.com/cespare/xxhash/v2", "github.com/google/go-cmp",
	"github.com/stretchr/testify", "github.com/davecgh/go-spew", "github.com/pmezard/go-difflib",
	"github.com/kr/pretty", "gopkg.in/check.v1", "gopkg.in/yaml.v3", "go.yaml.in/yaml/v3",
}

// watermill is Watermill and its own go.mod's requirements (the Prometheus
// client among them: Watermill's, not ours).
var watermill = []string{
	"github.com/ThreeDotsLabs/watermill",
	"github.com/cenkalti/backoff/v5", "github.com/go-chi/chi/v5", "github.com/gogo/protobuf", "github.com/golang/protobuf",
	"github.com/lithammer/shortuuid/v3", "github.com/oklog/ulid", "github.com/pkg/errors", "github.com/sony/gobreaker",
	"github.com/prometheus/client_golang", "github.com/prometheus/client_model", "github.com/prometheus/common",
	"github.com/prometheus/procfs", "github.com/beorn7/perks", "github.com/munnerz/goautoneg",
	"github.com/klauspost/compress", "github.com/kr/text", "golang.org/x/sys", "google.golang.org/protobuf",
}

// pgx is pgx and what its go.mod requires. The root module (the Writer,
// migrations, outboxadmin, outboxtest) brings none of it, so that a
// service on MySQL does not get it; its tests on PostgreSQL are in
// integration/dbtests.
var pgx = []string{
	"github.com/jackc/pgx/v5", "github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile", "github.com/jackc/puddle/v2",
	"golang.org/x/sync", "golang.org/x/text", "golang.org/x/mod", "golang.org/x/tools", // x/text's go.mod
	"github.com/stretchr/objx", // the testify pgx's go.mod raises to
}

// testHelpers is internal/testkit's module: a module whose tests use it
// requires it, and a user's graph lists it, but its own requirements
// (pgx) are not read, as no package of it is built.
var testHelpers = []string{"github.com/txoutbox/txoutbox/internal/testkit"}

// gormoutbox is gormoutbox with GORM and what their go.mod files require:
// GORM's go.mod requires the SQLite driver. gormoutbox's Examples import
// no GORM driver (its tests on both engines are in
// integration/engines/gormoutbox), so a service gets only its own.
var gormoutbox = []string{
	"github.com/txoutbox/txoutbox/gormoutbox",
	"gorm.io/gorm", "github.com/jinzhu/inflection", "github.com/jinzhu/now",
	"gorm.io/driver/sqlite", "github.com/mattn/go-sqlite3", "golang.org/x/sync", "golang.org/x/text",
	"golang.org/x/mod", "golang.org/x/tools", // x/text's go.mod
}

// claimCheckOnly are modules only the claim check (package claimcheck)
// may bring: object storage and the clouds' SDKs. Every case is checked
// for them by prefix too, so that a module of theirs added to an allowed
// list by mistake still fails.
var claimCheckOnly = []string{"gocloud.dev", "github.com/aws/", "cloud.google.com/", "github.com/Azure/", "github.com/txoutbox/txoutbox/claimcheck"}

// mysqlDrivers are MySQL's drivers: a service on PostgreSQL gains none of
// them, whatever package of ours it imports, so every case is checked for
// them by name too. Only the modules users do not import (integration,
// cmd/outbox, examples) require them, for the tests on MySQL.
var mysqlDrivers = []string{"github.com/go-sql-driver/mysql", "gorm.io/driver/mysql", "filippo.io/edwards25519"}

// cases are the packages a user imports alone, and what each may bring on
// top of base.
var cases = []struct {
	name    string
	imports []string
	allowed [][]string
}{
	{
		name:    "gormoutbox",
		imports: []string{"github.com/txoutbox/txoutbox/gormoutbox"},
		allowed: [][]string{base, gormoutbox},
	},
	{
		name:    "entoutbox",
		imports: []string{"github.com/txoutbox/txoutbox/entoutbox"},
		allowed: [][]string{base, {
			"github.com/txoutbox/txoutbox/entoutbox",
			"github.com/txoutbox/txoutbox/internal/entest", // the generated ent code entoutbox's tests use
			"entgo.io/ent", "ariga.io/atlas", "github.com/go-openapi/inflect", "github.com/hashicorp/hcl/v2",
			"github.com/agext/levenshtein", "github.com/apparentlymart/go-textseg/v15", "github.com/bmatcuk/doublestar",
			"github.com/mitchellh/go-wordwrap", "github.com/zclconf/go-cty", "github.com/zclconf/go-cty-yaml",
			// ent's own go.mod (its CLI and tests):
			"github.com/DATA-DOG/go-sqlmock", "github.com/golang/groupcache", "github.com/gorilla/websocket",
			"github.com/inconshreveable/mousetrap", "github.com/jessevdk/go-flags", "github.com/json-iterator/go",
			"github.com/mattn/go-runewidth", "github.com/mattn/go-sqlite3", "github.com/mitchellh/mapstructure",
			"github.com/modern-go/concurrent", "github.com/modern-go/reflect2", "github.com/niemeyer/pretty",
			"github.com/olekukonko/tablewriter", "github.com/rogpeppe/go-internal", "github.com/sergi/go-diff",
			"github.com/spf13/cobra", "github.com/spf13/pflag", "go.opencensus.io", "golang.org/x/sys",
			"golang.org/x/sync", "golang.org/x/text", "golang.org/x/mod", "golang.org/x/tools", "github.com/stretchr/objx",
		}},
	},
	{
		name:    "relay with the Kafka publisher",
		imports: []string{"github.com/txoutbox/txoutbox/relay", "github.com/txoutbox/txoutbox/relay/kafkapub"},
		allowed: [][]string{base, pgx, testHelpers, watermill, {
			"github.com/txoutbox/txoutbox/relay", "github.com/txoutbox/txoutbox/relay/kafkapub",
			"github.com/IBM/sarama", "github.com/ThreeDotsLabs/watermill-kafka/v3",
			"github.com/eapache/go-resiliency", "github.com/eapache/go-xerial-snappy", "github.com/eapache/queue",
			"github.com/golang/snappy", "github.com/pierrec/lz4/v4", "github.com/rcrowley/go-metrics",
			"github.com/hashicorp/errwrap", "github.com/hashicorp/go-multierror", "github.com/hashicorp/go-uuid",
			"github.com/jcmturner/aescts/v2", "github.com/jcmturner/dnsutils/v2", "github.com/jcmturner/gofork",
			"github.com/jcmturner/goidentity/v6", "github.com/jcmturner/gokrb5/v8", "github.com/jcmturner/rpc/v2",
			"golang.org/x/crypto", "golang.org/x/net", "golang.org/x/term", "golang.org/x/xerrors",
			// Sarama's and watermill-kafka's own go.mod files (tests, tracing):
			"github.com/dnwe/otelsarama", "go.uber.org/goleak", "github.com/gorilla/securecookie",
			"github.com/gorilla/sessions", "github.com/rogpeppe/go-internal", "github.com/yuin/goldmark", "gopkg.in/yaml.v2",
		}},
	},
	{
		name:    "relay with only a Watermill publisher",
		imports: []string{"github.com/txoutbox/txoutbox/relay", "github.com/ThreeDotsLabs/watermill/pubsub/gochannel"},
		allowed: [][]string{base, pgx, testHelpers, watermill, {
			"github.com/txoutbox/txoutbox/relay",
			"github.com/rogpeppe/go-internal", // go-cmp's go.mod, raised by Watermill's
		}},
	},
	{
		name:    "WAL relay with only a Watermill publisher",
		imports: []string{"github.com/txoutbox/txoutbox/relay/walrelay", "github.com/ThreeDotsLabs/watermill/pubsub/gochannel"},
		allowed: [][]string{base, pgx, testHelpers, watermill, {
			"github.com/txoutbox/txoutbox/relay", "github.com/txoutbox/txoutbox/relay/walrelay",
			"github.com/jackc/pglogrepl", "github.com/jackc/pgio", "golang.org/x/crypto", // pglogrepl and its go.mod
			"github.com/rogpeppe/go-internal", // go-cmp's go.mod, raised by Watermill's
		}},
	},
	{
		// The Writer, migrations and outboxadmin: no pgx, as a
		// service on MySQL needs none.
		name: "root module",
		imports: []string{"github.com/txoutbox/txoutbox", "github.com/txoutbox/txoutbox/migrations",
			"github.com/txoutbox/txoutbox/outboxadmin", "github.com/txoutbox/txoutbox/outboxadmin/console"},
		allowed: [][]string{base},
	},
	{
		// The test assertions are in the root module: nothing beyond base,
		// and no pgx (pgx handles are found by their Query method).
		name:    "outboxtest",
		imports: []string{"github.com/txoutbox/txoutbox/outboxtest"},
		allowed: [][]string{base},
	},
	{
		// A GORM service's tests using outboxtest: what gormoutbox brings,
		// and no more (no Watermill, no relay).
		name:    "gormoutbox with outboxtest",
		imports: []string{"github.com/txoutbox/txoutbox/gormoutbox", "github.com/txoutbox/txoutbox/outboxtest"},
		allowed: [][]string{base, gormoutbox},
	},
	{
		// The recording publisher and Drain: the relay's graph.
		name:    "relay/relaytest",
		imports: []string{"github.com/txoutbox/txoutbox/relay/relaytest"},
		allowed: [][]string{base, pgx, testHelpers, watermill, {
			"github.com/txoutbox/txoutbox/relay",
			"github.com/rogpeppe/go-internal", // go-cmp's go.mod, raised by Watermill's
		}},
	},
	{
		name:    "inbox",
		imports: []string{"github.com/txoutbox/txoutbox/inbox"},
		allowed: [][]string{base, watermill, {"github.com/txoutbox/txoutbox/inbox"}},
	},
}

func TestWhatEachPackageBrings(t *testing.T) {
	testkit.Long(t, "the module graph of each package (go list -m in a module per package)")
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed: %v", err)
	}
	modules := ourModules(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			var gomod strings.Builder
			gomod.WriteString("module example.com/user\n\ngo 1.26.0\n\n")
			for path, d := range modules {
				gomod.WriteString("replace " + path + " => " + d + "\n")
			}
			var main strings.Builder
			main.WriteString("package main\n\nimport (\n")
			for _, imp := range tc.imports {
				main.WriteString("\t_ \"" + imp + "\"\n")
			}
			main.WriteString(")\n\nfunc main() {}\n")
			write(t, filepath.Join(dir, "go.mod"), gomod.String())
			write(t, filepath.Join(dir, "main.go"), main.String())

			run(t, dir, goBin, "mod", "tidy")
			run(t, dir, goBin, "build", "-o", os.DevNull, ".")
			out := run(t, dir, goBin, "list", "-m", "-f", "{{if not .Main}}{{.Path}}{{end}}", "all")
			var got, unexpected []string
			allowed := map[string]bool{}
			for _, list := range tc.allowed {
				for _, m := range list {
					allowed[m] = true
				}
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			for sc.Scan() {
				m := strings.TrimSpace(sc.Text())
				if m == "" {
					continue
				}
				got = append(got, m)
				if !allowed[m] || slices.ContainsFunc(claimCheckOnly, func(p string) bool { return strings.HasPrefix(m, p) }) || slices.Contains(mysqlDrivers, m) {
					unexpected = append(unexpected, m)
				}
			}
			t.Logf("%d modules in the graph: %s", len(got), strings.Join(got, " "))
			if len(unexpected) > 0 {
				t.Errorf("modules %s does not need: %s\n(if one is now legitimately needed, add it to the case's list here and to docs/development.md's \"What each package brings\")",
					tc.name, strings.Join(unexpected, " "))
			}
		})
	}
}

// ourModules maps each module of this repository to its directory.
func ourModules(t *testing.T) map[string]string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("not in the repository: %v", err)
	}
	mods := map[string]string{}
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		first, _, _ := strings.Cut(string(data), "\n")
		path, ok := strings.CutPrefix(first, "module ")
		if !ok {
			t.Fatalf("%s does not start with a module line", p)
		}
		mods[strings.TrimSpace(path)] = filepath.Dir(p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) < 2 || !slices.Contains(mapKeys(mods), "github.com/txoutbox/txoutbox") {
		t.Fatalf("found modules %v", mods)
	}
	return mods
}

func mapKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run runs the go command in dir outside the workspace and returns its
// standard output.
func run(t *testing.T, dir, goBin string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}
