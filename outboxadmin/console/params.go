package console

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

// badInput is a request the console refuses with 400 and a message; it has
// touched nothing.
type badInput struct{ msg string }

func (e badInput) Error() string { return e.msg }

func badf(format string, args ...any) error { return badInput{fmt.Sprintf(format, args...)} }

// maxField is the longest filter value accepted (topics, types and
// aggregate ids are short; a longer value is a mistake or an attack).
const maxField = 1024

// query parses r's query string. A malformed one is refused whole: a raw
// ";" or a bad escape would otherwise drop that pair silently, and a
// preview would select more than the operator asked for.
func query(r *http.Request) (url.Values, error) {
	v, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badf("malformed query string: %v (write ; as %%3B)", err)
	}
	return v, nil
}

// text reads a trimmed text field: UTF-8 without NUL, as PostgreSQL's text
// is.
func text(v url.Values, name string) (string, error) {
	s := strings.TrimSpace(v.Get(name))
	switch {
	case len(s) > maxField:
		return "", badf("%s is longer than %d bytes", name, maxField)
	case !utf8.ValidString(s):
		return "", badf("%s is not UTF-8 text", name)
	case strings.ContainsRune(s, 0):
		return "", badf("%s contains a NUL character", name)
	}
	return s, nil
}

// parseTime reads a point in time: a duration ago (90m, 24h), an RFC 3339
// time, or a browser's datetime-local value (taken as UTC). Empty is the
// zero time.
func parseTime(v url.Values, name string, now time.Time) (time.Time, error) {
	s, err := text(v, name)
	if err != nil || s == "" {
		return time.Time{}, err
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, badf("%s: negative duration %q", name, s)
		}
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, badf("%s: %q is not a time: want a duration ago (90m, 24h) or a time (2026-11-30T10:00:00Z; without a zone, UTC)", name, s)
}

// parseID reads a positive row id.
func parseID(s, name string) (int64, error) {
	id, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || id <= 0 {
		return 0, badf("%s: %q is not an event ID (a positive integer, the ID column)", name, s)
	}
	return id, nil
}

// parseIDs reads a comma- or space-separated list of row ids, each once.
func parseIDs(s string) ([]int64, error) {
	var ids []int64
	seen := map[int64]bool{}
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		id, err := parseID(f, "ids")
		if err != nil {
			return nil, err
		}
		if !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) > confirmMax {
		return nil, badf("ids: %d events, at most %d at a time", len(ids), confirmMax)
	}
	return ids, nil
}

// deadQuery is the dead-letter page's filter, as given and as parsed.
type deadQuery struct {
	Topic, Type, Aggregate, Since, Until string // as given, for the form
	filter                               outboxadmin.Filter
}

// parseDeadQuery reads the dead-letter filter: topic, type, aggregate,
// since, until and ids.
func parseDeadQuery(v url.Values, now time.Time) (deadQuery, error) {
	var (
		q   deadQuery
		err error
	)
	for _, f := range []struct {
		name string
		dst  *string
	}{{"topic", &q.Topic}, {"type", &q.Type}, {"aggregate", &q.Aggregate}, {"since", &q.Since}, {"until", &q.Until}} {
		if *f.dst, err = text(v, f.name); err != nil {
			return q, err
		}
	}
	q.filter = outboxadmin.Filter{Topic: q.Topic, Type: q.Type, AggregateID: q.Aggregate}
	if q.filter.Since, err = parseTime(v, "since", now); err != nil {
		return q, err
	}
	if q.filter.Until, err = parseTime(v, "until", now); err != nil {
		return q, err
	}
	if !q.filter.Since.IsZero() && !q.filter.Until.IsZero() && !q.filter.Since.Before(q.filter.Until) {
		return q, badf("since (%s) is not before until (%s)", q.filter.Since.Format(time.RFC3339), q.filter.Until.Format(time.RFC3339))
	}
	if s := v.Get("ids"); s != "" {
		if q.filter.IDs, err = parseIDs(s); err != nil {
			return q, err
		}
	}
	return q, nil
}

// values renders the filter for links and hidden fields, times absolute, so
// a confirmation acts on the window that was previewed.
func (q deadQuery) values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("topic", q.filter.Topic)
	set("type", q.filter.Type)
	set("aggregate", q.filter.AggregateID)
	if !q.filter.Since.IsZero() {
		v.Set("since", q.filter.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.filter.Until.IsZero() {
		v.Set("until", q.filter.Until.UTC().Format(time.RFC3339Nano))
	}
	return v
}

// parseLimit reads a page size: default def, at most max.
func parseLimit(v url.Values, def, maxLimit int) (int, error) {
	s := v.Get("limit")
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return 0, badf("limit: %q is not a number from 1 to %d", s, maxLimit)
	}
	return n, nil
}

// parseAfter reads the keyset page start: a row id, 0 for the first page.
func parseAfter(v url.Values) (int64, error) {
	s := v.Get("after")
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, badf("after: %q is not an event ID", s)
	}
	return n, nil
}

var errNoSelection = errors.New("select events first: give IDs or at least one filter")
