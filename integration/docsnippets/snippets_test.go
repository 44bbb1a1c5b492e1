package docsnippets

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// block is one ```go block of a Markdown file.
type block struct {
	where string // file:line of the opening fence
	lines []string
}

// A block is a fragment: it uses names the prose around it introduces (a
// db, a tx, an order). setups gives them, keyed by the block's first line,
// as the declarations the block's function body starts with (vars) and
// top-level declarations (top). A new block needs an entry here.
var setups = map[string]struct{ vars, top string }{
	`p, err := gormoutbox.New(gormoutbox.Config{DefaultTopic: "orders"})`: {
		vars: `var db *gorm.DB; var order Order; var placed any`,
		top:  `type Order struct { ID uint; Total int64; gormoutbox.Events }`,
	},
	`entc.Generate("./schema", &gen.Config{}, entc.Extensions(entoutboxext.New()))`: {
		vars: `var ctx context.Context; var client *ent.Client`,
	},
	`// entc.go: the one extra line`: {
		vars: `var ctx context.Context; var client *ent.Client`,
	},
	`w, err := txoutbox.NewWriter(txoutbox.WriterConfig{})`: {
		vars: `var ctx context.Context; var tx *sql.Tx; var orderID string; var placed any`,
	},
	`w, err := txoutbox.NewWriter(txoutbox.WriterConfig{})          // table "outbox", NOTIFY on`: {
		vars: `var ctx context.Context; var tx *sql.Tx; var orderID string; var placed any`,
	},
	`pub, err := kafkapub.NewPublisher(brokers, kafkapub.Config{})`: {
		vars: `var ctx context.Context; var db *sql.DB; var brokers []string`,
	},
	`ib, _ := inbox.New(inbox.Config{})`: {
		vars: `var db *sql.DB; var router *message.Router`,
	},
	`// outbox migrate up --set inbox     (or migrations.Config{Set: migrations.Inbox})`: {
		vars: `var db *sql.DB; var router *message.Router`,
	},
	`e := outboxtest.RequireEvent(ctx, t, db, outboxtest.Want{Type: "order.placed", AggregateID: "42"})`: {
		vars: `var ctx context.Context; var t *testing.T; var db *sql.DB`,
		top:  `type OrderPlaced struct{ Total int64 }`,
	},
	`e := outboxtest.RequireEvent(ctx, t, db, outboxtest.Want{Topic: "orders", Type: "order.placed", AggregateID: "42"})`: {
		vars: `var ctx context.Context; var t *testing.T; var db *sql.DB`,
		top:  `type OrderPlaced struct{ Total int64 }`,
	},
	`ev, err := txoutbox.NewEvent("outbox.event.order", "order", orderID, "order.placed", placed)`: {
		vars: `var orderID string; var placed any`,
	},
	`ev, err := txoutbox.NewEvent("reminders", "order", "reminder-"+orderID, "order.reminder", reminder)`: {
		vars: `var ctx context.Context; var tx *sql.Tx; var w *txoutbox.Writer; var orderID string; var reminder any`,
	},
	`adm, _ := outboxadmin.New(db, outboxadmin.Config{})`: {
		vars: `var ctx context.Context; var db *sql.DB; var mux *http.ServeMux; var operatorOf func(*http.Request) (string, error); var requireOperator func(http.Handler) http.Handler`,
	},
	`pub := relaytest.NewPublisher()`: {
		vars: `var ctx context.Context; var sqlDB *sql.DB; var handler func(*message.Message) error`,
	},
	`r, err := walrelay.New(url, pub, walrelay.Config{}) // url: a libpq URL; replication=database is added`: {
		vars: `var ctx context.Context; var url string; var pub message.Publisher`,
	},
	`store, err := claimcheck.Open(ctx, "s3://payloads?region=eu-west-1", claimcheck.Config{})`: {
		vars: `var ctx context.Context; var db *sql.DB; var pub message.Publisher`,
	},
	`router.AddMiddleware(claimcheck.Middleware(store))`: {
		vars: `var router *message.Router; var store *claimcheck.Store`,
	},
}

// imports are what a block may use; the ones it does not are dropped.
// The generated ent package is "ent", as in an application's code; a
// block's schema methods (func (Order) ...) go to a file of their own,
// where "ent" is entgo.io/ent, as in the application's schema package.
var imports = []string{
	`"context"`, `"database/sql"`, `"net/http"`, `"testing"`, `"time"`,
	`"entgo.io/ent/entc"`, `"entgo.io/ent/entc/gen"`,
	`"github.com/ThreeDotsLabs/watermill/message"`,
	`"gorm.io/gorm"`,
	`"github.com/txoutbox/txoutbox"`,
	`"github.com/txoutbox/txoutbox/claimcheck"`,
	`"github.com/txoutbox/txoutbox/entoutbox"`,
	`"github.com/txoutbox/txoutbox/entoutbox/entoutboxext"`,
	`ent "github.com/txoutbox/txoutbox/examples/ent/ent"`,
	`"github.com/txoutbox/txoutbox/gormoutbox"`,
	`"github.com/txoutbox/txoutbox/inbox"`,
	`"github.com/txoutbox/txoutbox/migrations"`,
	`"github.com/txoutbox/txoutbox/outboxadmin"`,
	`"github.com/txoutbox/txoutbox/outboxadmin/console"`,
	`"github.com/txoutbox/txoutbox/outboxtest"`,
	`"github.com/txoutbox/txoutbox/relay"`,
	`"github.com/txoutbox/txoutbox/relay/kafkapub"`,
	`"github.com/txoutbox/txoutbox/relay/relaytest"`,
	`"github.com/txoutbox/txoutbox/relay/walrelay"`,
}

func TestEveryGoBlockOfTheDocsCompiles(t *testing.T) {
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	var blocks []block
	for _, f := range files {
		bs, err := goBlocks(f, root)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, bs...)
	}
	if len(blocks) < 10 {
		t.Fatalf("found %d Go blocks in %s: the docs moved?", len(blocks), strings.Join(files, ", "))
	}

	gen, err := os.MkdirTemp(".", "_gen") // "_": no ./... pattern of the module sees it
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(gen) })
	pkgs := map[string]*pkg{} // by directory
	for i, b := range blocks {
		s, ok := setups[strings.TrimSpace(b.lines[0])]
		if !ok {
			t.Errorf("%s: a Go block this test has no setup for: add its first line to setups\n%s", b.where, b.lines[0])
			continue
		}
		dir := filepath.Join(gen, fmt.Sprintf("b%02d", i))
		p := newPkg(b, s.vars, s.top)
		if err := p.write(dir); err != nil {
			t.Fatal(err)
		}
		pkgs[dir] = p
	}
	if t.Failed() {
		return
	}
	// Unused names and imports are the fragment's nature, not faults:
	// use them and drop them, and compile again, until only real errors
	// remain.
	for round := 0; ; round++ {
		args := []string{"build", "-gcflags=-e"}
		for dir := range pkgs {
			args = append(args, "./"+dir) // a pattern would not look under "_"
		}
		out, err := exec.Command("go", args...).CombinedOutput()
		if err == nil {
			return
		}
		type report struct {
			p         *pkg
			file, msg string
			line      int
			whole     string
		}
		var reports []report
		for _, line := range strings.Split(string(out), "\n") {
			if m := errLine.FindStringSubmatch(line); m != nil {
				reports = append(reports, report{pkgs[filepath.Join(gen, filepath.Base(filepath.Dir(m[1])))], filepath.Base(m[1]), m[4], atoi(m[2]), line})
			}
		}
		// Last lines first: a fix inserts a line, which moves the ones
		// below it.
		slices.SortStableFunc(reports, func(a, b report) int { return b.line - a.line })
		fixed := false
		var real []string
		for _, r := range reports {
			switch {
			case r.p == nil:
				real = append(real, r.whole)
			case r.p.fix(r.file, r.line, r.msg):
				fixed = true
			default:
				real = append(real, fmt.Sprintf("%s (%s:%d): %s", r.p.where, r.file, r.line, r.msg))
			}
		}
		if len(real) > 0 || !fixed || round > 8 {
			t.Fatalf("the docs' Go blocks do not compile:\n%s\n\n%s", strings.Join(real, "\n"), out)
		}
		for dir, p := range pkgs {
			if err := p.write(dir); err != nil {
				t.Fatal(err)
			}
		}
	}
}

var errLine = regexp.MustCompile(`^(?:\./)?(_gen[^:]*/b\d+/[a-z]+\.go):(\d+):(\d+:)? (.*)$`)

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// goBlocks returns the ```go blocks of the Markdown file f.
func goBlocks(f, root string) ([]block, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return nil, err
	}
	rel, _ := filepath.Rel(root, f)
	var (
		out []block
		cur *block
	)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && strings.TrimSpace(line) == "```go":
			cur = &block{where: fmt.Sprintf("%s:%d", rel, n)}
		case cur != nil && strings.TrimSpace(line) == "```":
			if len(cur.lines) > 0 {
				out = append(out, *cur)
			}
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, line)
		}
	}
	return out, sc.Err()
}

// pkg is one block made a package: main.go holds the block's statements
// in a function, schema.go its methods, if any.
type pkg struct {
	where   string
	imports map[string][]string // by file: the imports left
	body    []string            // the function body's lines
	vars    string
	top     string
	methods []string
}

func newPkg(b block, vars, top string) *pkg {
	p := &pkg{where: b.where, vars: vars, top: top, imports: map[string][]string{
		"main.go":   slices.Clone(imports),
		"schema.go": {`"entgo.io/ent"`, `"github.com/txoutbox/txoutbox/entoutbox"`},
	}}
	in := false
	for _, l := range b.lines {
		switch {
		case strings.HasPrefix(l, "func "):
			in = true
			p.methods = append(p.methods, l)
		case in:
			p.methods = append(p.methods, l)
			if l == "}" {
				in = false
			}
		default:
			p.body = append(p.body, l)
		}
	}
	return p
}

// The function's body starts on this line of main.go (see write).
const bodyLine = 1 + 1 + 1 // package, import, func

func (p *pkg) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var m strings.Builder
	fmt.Fprintf(&m, "package b\nimport (%s)\nfunc _() {\n", strings.Join(p.imports["main.go"], "; "))
	for _, l := range p.body {
		m.WriteString(l + "\n")
	}
	fmt.Fprintf(&m, "}\n%s\n", p.top)
	// The setup's declarations come first in the body: on one line of
	// their own, inserted where the function opens.
	src := strings.Replace(m.String(), "func _() {\n", "func _() {"+p.vars+"\n", 1)
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		return err
	}
	if len(p.methods) == 0 {
		return nil
	}
	s := fmt.Sprintf("package b\nimport (%s)\ntype Order struct{ ent.Schema }\n%s\n",
		strings.Join(p.imports["schema.go"], "; "), strings.Join(p.methods, "\n"))
	return os.WriteFile(filepath.Join(dir, "schema.go"), []byte(s), 0o644)
}

var (
	unusedVar    = regexp.MustCompile(`^declared and not used: (\w+)$`)
	unusedImport = regexp.MustCompile(`^"([^"]+)" imported(?: as \w+)? and not used$`)
)

// fix mends what the compiler said of file's line if it is a fragment's
// nature: an unused import is dropped, an unused name used.
func (p *pkg) fix(file string, line int, msg string) bool {
	if m := unusedImport.FindStringSubmatch(msg); m != nil {
		before := len(p.imports[file])
		p.imports[file] = slices.DeleteFunc(p.imports[file], func(imp string) bool { return strings.HasSuffix(imp, `"`+m[1]+`"`) })
		return len(p.imports[file]) < before
	}
	m := unusedVar.FindStringSubmatch(msg)
	if m == nil || file != "main.go" {
		return false
	}
	if line == bodyLine {
		// A setup's own declaration the block did not use.
		p.vars += "; _ = " + m[1]
		return true
	}
	// A name the block declares: use it right after the statement that
	// declares it, in its own scope.
	i := line - bodyLine - 1
	if i < 0 || i >= len(p.body) {
		return false
	}
	end := statementEnd(p.body, i)
	p.body = slices.Insert(p.body, end+1, "_ = "+m[1])
	return true
}

// statementEnd returns the index of the last line of the statement that
// starts on body[i], by parsing the body.
func statementEnd(body []string, i int) int {
	src := "package b\nfunc _() {\n" + strings.Join(body, "\n") + "\n}\n"
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err != nil {
		return i
	}
	end := i
	ast.Inspect(f, func(n ast.Node) bool {
		s, ok := n.(ast.Stmt)
		if !ok || n == nil {
			return true
		}
		if _, block := s.(*ast.BlockStmt); block {
			return true
		}
		if fset.Position(s.Pos()).Line-3 == i { // line 1: package, 2: func
			end = max(end, fset.Position(s.End()).Line-3)
		}
		return true
	})
	return end
}
