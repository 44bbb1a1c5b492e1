package console

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

var (
	errCSRF     = errors.New("missing or wrong CSRF token: reload the page and submit its form again")
	errReadOnly = errors.New("this console is read-only: it changes nothing unless started with --allow-writes (Options.AllowWrites)")
)

// formMax bounds a form's body: confirmMax ids and a filter fit easily.
const formMax = 64 << 10

// writes guards a state-changing POST: its form must carry the CSRF token,
// and the console must allow writes. A refused request changes nothing.
func (c *Console) writes(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, formMax)
		if err := r.ParseForm(); err != nil {
			c.fail(w, r, badf("unreadable form: %v", err))
			return
		}
		if !c.csrf.valid(r) {
			c.log.Warn("outbox console: refused a POST without a valid CSRF token", "path", r.URL.Path, "remote", r.RemoteAddr,
				operatorAttr(r))
			c.fail(w, r, errCSRF)
			return
		}
		if !c.opts.AllowWrites {
			c.fail(w, r, errReadOnly)
			return
		}
		h(w, r)
	}
}

// doneData reports what an action changed.
type doneData struct {
	Action  string
	Count   int64
	Rows    []outboxadmin.Row
	Retried []outboxadmin.Retried
	Replay  *outboxadmin.ReplayResult
}

// confirmed reads a retry's or drop's confirmation: the previewed ids and
// the filter they were selected by (checked again).
func confirmed(r *http.Request) (outboxadmin.Filter, error) {
	q, err := parseDeadQuery(r.PostForm, time.Now())
	if err != nil {
		return outboxadmin.Filter{}, err
	}
	if len(q.filter.IDs) == 0 {
		return outboxadmin.Filter{}, badf("ids: no events to change: preview a selection first")
	}
	return q.filter, nil
}

func (c *Console) deadRetry(w http.ResponseWriter, r *http.Request) {
	deadChange(c, w, r, c.adm.Retry, "outbox console: retried dead events", func(retried []outboxadmin.Retried) doneData {
		return doneData{Action: "retry", Count: int64(len(retried)), Retried: retried}
	})
}

func (c *Console) deadDrop(w http.ResponseWriter, r *http.Request) {
	deadChange(c, w, r, c.adm.Drop, "outbox console: dropped dead events", func(dropped []outboxadmin.Row) doneData {
		return doneData{Action: "drop", Count: int64(len(dropped)), Rows: dropped}
	})
}

// deadChange is a confirmed retry or drop: change applied to the previewed
// ids, logged as msg with who asked, and its outcome shown as done says.
func deadChange[T any](c *Console, w http.ResponseWriter, r *http.Request,
	change func(context.Context, outboxadmin.Filter, bool) ([]T, error), msg string, done func([]T) doneData) {
	f, err := confirmed(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	changed, err := change(r.Context(), f, false)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.log.Info(msg, "count", len(changed), "ids", logIDs(f.IDs),
		"filter", filterAttrs(f), "remote", r.RemoteAddr, operatorAttr(r))
	c.render(w, r, http.StatusOK, "done", "dead", done(changed))
}

// replayQuery is the replay form, as given and parsed.
type replayQuery struct {
	Since, Topic, Aggregate string
	filter                  outboxadmin.ReplayFilter
}

func parseReplay(v url.Values, now time.Time) (replayQuery, error) {
	var (
		q   replayQuery
		err error
	)
	if q.Since, err = text(v, "since"); err != nil {
		return q, err
	}
	if q.Topic, err = text(v, "topic"); err != nil {
		return q, err
	}
	if q.Aggregate, err = text(v, "aggregate"); err != nil {
		return q, err
	}
	if q.Since == "" {
		return q, badf("since is required: replay the events published since when?")
	}
	q.filter = outboxadmin.ReplayFilter{Topic: q.Topic, AggregateID: q.Aggregate}
	if q.filter.Since, err = parseTime(v, "since", now); err != nil {
		return q, err
	}
	if q.filter.Since.After(now) {
		return q, badf("since is in the future")
	}
	return q, nil
}

type replayData struct {
	Query replayQuery
	// DryRun is the dry run's result, nil before one ran; SinceAbs the
	// start it used, which the confirmation sends back.
	DryRun   *outboxadmin.ReplayResult
	SinceAbs string
}

// replayForm shows the replay form and, once filled in, the dry run: what
// a replay would return to pending. The dry run only reads.
func (c *Console) replayForm(w http.ResponseWriter, r *http.Request) {
	v, err := query(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if len(v) == 0 {
		c.render(w, r, http.StatusOK, "replay", "replay", replayData{})
		return
	}
	q, err := parseReplay(v, time.Now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	res, err := c.adm.Replay(r.Context(), q.filter, true)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "replay", "replay", replayData{Query: q, DryRun: &res, SinceAbs: q.filter.Since.UTC().Format(time.RFC3339Nano)})
}

func (c *Console) replay(w http.ResponseWriter, r *http.Request) {
	q, err := parseReplay(r.PostForm, time.Now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	res, err := c.adm.Replay(r.Context(), q.filter, false)
	if err != nil {
		// Replay commits aggregate by aggregate: some may be pending
		// again already.
		c.log.Error("outbox console: replay failed", "replayed", res.Events, "since", q.filter.Since,
			"topic", q.filter.Topic, "aggregate", q.filter.AggregateID, "remote", r.RemoteAddr,
			operatorAttr(r), "err", err)
		c.fail(w, r, err)
		return
	}
	c.log.Info("outbox console: replayed events", "count", res.Events, "first_id", res.FirstID, "last_id", res.LastID,
		"since", q.filter.Since, "topic", q.filter.Topic, "aggregate", q.filter.AggregateID, "remote", r.RemoteAddr,
		operatorAttr(r))
	c.render(w, r, http.StatusOK, "done", "replay", doneData{Action: "replay", Count: res.Events, Replay: &res})
}

// logIDs keeps a log record short: the first ids of a large selection.
func logIDs(ids []int64) string {
	const most = 50
	if len(ids) > most {
		return joinIDs(ids[:most]) + ",…"
	}
	return joinIDs(ids)
}

func filterAttrs(f outboxadmin.Filter) map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{"topic": f.Topic, "type": f.Type, "aggregate": f.AggregateID} {
		if v != "" {
			out[k] = v
		}
	}
	if !f.Since.IsZero() {
		out["since"] = f.Since.UTC().Format(time.RFC3339)
	}
	if !f.Until.IsZero() {
		out["until"] = f.Until.UTC().Format(time.RFC3339)
	}
	return out
}

// operatorAttr names Options.Authenticate's operator in a log record, and
// is empty (dropped by the handler) without one.
func operatorAttr(r *http.Request) slog.Attr {
	if op := operator(r.Context()); op != "" {
		return slog.String("operator", op)
	}
	return slog.Attr{}
}
