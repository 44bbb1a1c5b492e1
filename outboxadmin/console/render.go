package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/txoutbox/internal/human"
	"github.com/txoutbox/txoutbox/migrations"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// pageNames are the templates under assets/templates, each rendered inside
// layout.html.
var pageNames = []string{"index", "overview", "relays", "dead", "confirm", "done", "events", "event", "replay", "error"}

// funcs are the templates' helpers. Every string from the database goes
// through esc (a value shown whole), short (a table cell) or, in a <pre>,
// lines: control and bidirectional characters are shown escaped.
var funcs = template.FuncMap{
	"dur":   human.Duration,
	"ts":    formatTime,
	"short": func(n int, s string) string { return human.OneLine(s, n) },
	"esc":   human.Escape,
	"lines": human.EscapeLines,
	"clip":  clipValue,
	// findable: a value the events page can look up (a longer one is
	// refused as a filter).
	"findable": func(s string) bool { return len(s) <= maxField },
	"add":      func(a, b int) int { return a + b },
	// count shows a count with mark (~ or ≥) before it when it is not
	// exact (txoutbox.Stats, TopicStats).
	"count": func(n int64, inexact bool, mark string) string {
		if inexact {
			return mark + strconv.FormatInt(n, 10)
		}
		return strconv.FormatInt(n, 10)
	},
	// matched shows a CountDead result: at least CountDeadMax once there.
	"matched": func(n int64) string {
		if n >= outboxadmin.CountDeadMax {
			return "≥" + strconv.FormatInt(n, 10)
		}
		return strconv.FormatInt(n, 10)
	},
	"rate": func(r *float64) string {
		if r == nil {
			return "–"
		}
		return strconv.FormatFloat(*r, 'f', 1, 64) + "/s"
	},
}

func parsePages() (map[string]*template.Template, error) {
	pages := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(assets, "assets/templates/layout.html", "assets/templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

// page is what every template gets.
type page struct {
	Title  string
	Root   string // relative path to the console's root: "./" or "../"
	Writes bool   // Options.AllowWrites
	CSRF   string
	Nav    string // the menu entry to highlight; "index" on a Multi's own pages
	// Table is the table a Multi's page shows ("" alone), and Index the
	// relative path to the Multi's index ("" alone).
	Table, Index string
	Data         any
}

// render writes the page name with status.
func (s *shell) render(w http.ResponseWriter, r *http.Request, status int, name, nav string, data any) {
	p := page{Title: s.opts.Title, Root: root(r), Writes: s.opts.AllowWrites, CSRF: s.csrf.token(w, r), Nav: nav, Table: s.table, Data: data}
	switch {
	case s.multi:
		p.Nav, p.Index = "index", p.Root
	case s.table != "":
		p.Index = p.Root + "../../" // from /tables/<name>/
	}
	var b bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&b, "layout", p); err != nil {
		s.log.Error("outbox console: render", "page", name, "err", err)
		http.Error(w, "internal error: the console's log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(inertHTML(b.Bytes())) //nolint:errcheck // the client went away
}

// inertHTML writes the control and bidirectional characters left in a
// page as character references. Text goes through esc, short or lines
// already; what is left is in attribute values (a filter echoed in its
// input, the hidden fields of a confirmation), where a reference means the
// same value to the browser and the page's source stays plain text.
func inertHTML(page []byte) []byte {
	var out []byte
	last := 0
	for i := 0; i < len(page); {
		r, n := utf8.DecodeRune(page[i:])
		if r != '\n' && r != '\t' && (r < 0x20 || r >= 0x7f && r < 0xa0 || human.IsBidi(r)) {
			if out == nil {
				out = make([]byte, 0, len(page)+16)
			}
			out = append(out, page[last:i]...)
			out = fmt.Appendf(out, "&#x%x;", r)
			last = i + n
		}
		i += n
	}
	if out == nil {
		return page
	}
	return append(out, page[last:]...)
}

// root is the relative path from r's page to the console's root, so links
// work under any mount prefix: "/" and "/dead" give "./", "/events/12"
// "../".
func root(r *http.Request) string {
	depth := strings.Count(r.URL.Path, "/") - 1
	if depth <= 0 {
		return "./"
	}
	return strings.Repeat("../", depth)
}

// errorPage is the error template's data.
type errorPage struct {
	Status  int
	Message string
}

// fail answers err with its status: 400 for bad input, 404 for an unknown
// event, 409 when a confirmed selection changed meanwhile, 403 for a write
// to a read-only console, 503 for a table whose schema the console does
// not match (outboxadmin.Admin.CheckSchema: it says what to run), otherwise 500 with a generic message (database
// errors may name hosts and roles) and the error in the log.
func (s *shell) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		bad    badInput
		status int
		msg    string
	)
	switch {
	case errors.As(err, &bad):
		status, msg = http.StatusBadRequest, bad.msg
	case errors.Is(err, errNoSelection), errors.Is(err, outboxadmin.ErrNoSelection), errors.Is(err, outboxadmin.ErrNoSince):
		status, msg = http.StatusBadRequest, err.Error()
	case errors.Is(err, outboxadmin.ErrNotFound), errors.Is(err, errNoTable):
		status, msg = http.StatusNotFound, err.Error()
	case errors.Is(err, outboxadmin.ErrNotDead):
		status, msg = http.StatusConflict, err.Error()+": nothing changed; the selection changed since the preview, look again"
	case errors.Is(err, outboxadmin.ErrWALStreamed):
		status, msg = http.StatusConflict, err.Error()+"; nothing changed"
	case errors.Is(err, errReadOnly), errors.Is(err, errCSRF):
		status, msg = http.StatusForbidden, err.Error()
	case errors.Is(err, migrations.ErrSchemaTooOld), errors.Is(err, migrations.ErrSchemaTooNew):
		status, msg = http.StatusServiceUnavailable, err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		status, msg = http.StatusServiceUnavailable, "the database did not answer in time"
		s.log.Error("outbox console: request failed", "path", r.URL.Path, "err", err)
	default:
		status, msg = http.StatusInternalServerError, "internal error: the console's log has the details"
		s.log.Error("outbox console: request failed", "path", r.URL.Path, "err", err)
		if s.internalError != nil {
			s.internalError()
		}
	}
	if strings.HasPrefix(r.URL.Path, "/api/") {
		writeJSON(w, status, map[string]string{"error": msg})
		return
	}
	s.render(w, r, status, "error", "", errorPage{Status: status, Message: msg})
}

// writeJSON answers v as JSON, with the characters a terminal would act on
// as \u escapes (human.EscapeJSON): the same document, safe to curl.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error: the console's log has the details", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(human.EscapeJSON(b), '\n')) //nolint:errcheck // the client went away
}

func formatTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	case *time.Time:
		if v == nil {
			return ""
		}
		return v.UTC().Format("2006-01-02 15:04:05Z")
	}
	return fmt.Sprint(t)
}

// valueShownMax is the most bytes of one value (a header, the last error,
// a topic) the event's page shows; the payload has its own bounds.
const valueShownMax = 64 << 10

// clipValue cuts s at valueShownMax bytes, on a character boundary, and
// says how long it is and where to see it whole.
func clipValue(s string) string {
	if len(s) <= valueShownMax {
		return s
	}
	i := valueShownMax
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf("… (%d bytes in all: outbox dead show --full prints it whole)", len(s))
}

// payloadView is a payload as the detail page shows it.
type payloadView struct {
	Kind string // its form (human.Payload), and what was cut
	Text string
}

// payloadShownMax is the most payload bytes the detail page shows whole;
// of a larger payload it shows the first human.PayloadHead, as outbox dead
// show does past its own bound.
const payloadShownMax = 256 << 10

// viewPayload renders b as human.ShowPayload does, saying how much was
// cut and where to see it whole.
func viewPayload(b []byte) payloadView {
	p := human.ShowPayload(b, payloadShownMax)
	v := payloadView{Kind: p.Kind, Text: p.Text}
	if p.Cut > 0 {
		v.Kind += fmt.Sprintf("; the first %d of %d bytes, %d cut: outbox dead show --full prints it whole", len(b)-p.Cut, len(b), p.Cut)
	}
	return v
}
