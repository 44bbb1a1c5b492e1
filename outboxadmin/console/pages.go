package console

import (
	"cmp"
	"context"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

// overviewData is the overview page's and its JSON's content.
type overviewData struct {
	Backlog int64 `json:"backlog"`
	// BacklogEstimated and DeadEstimated: the count is an estimate
	// (txoutbox.Stats), shown as ~N.
	BacklogEstimated   bool                  `json:"backlog_estimated"`
	LagSeconds         float64               `json:"lag_seconds"`
	Lag                time.Duration         `json:"-"`
	Dead               int64                 `json:"dead"`
	DeadEstimated      bool                  `json:"dead_estimated"`
	Scheduled          int64                 `json:"scheduled"`
	ScheduledEstimated bool                  `json:"scheduled_estimated"` // shown as ~N
	NextSched          time.Time             `json:"next_scheduled,omitzero"`
	PublishRate        *float64              `json:"publish_rate"`
	Topics             []txoutbox.TopicStats `json:"-"`
	TopicsJSON         []topicJSON           `json:"topics"`
	NoTopics           bool                  `json:"topics_unsupported,omitempty"` // no per-topic figures (MySQL): topics is empty
	Relays             int                   `json:"relays_alive"`
	Unowned            int                   `json:"unowned_shards"`
	Handovers          int                   `json:"handover_shards"`
	Slot               *slotJSON             `json:"wal_slot,omitempty"`
	History            []point               `json:"history"`
	// At is the database clock of the last count (backlog, dead, topics),
	// which is paced while counting is slow.
	At         time.Time          `json:"at"`
	Status     outboxadmin.Status `json:"-"`
	PollMillis int64              `json:"-"` // how often the page polls: SampleEvery
}

// slotJSON is the WAL relay's slot, when it exists.
type slotJSON struct {
	Name      string `json:"name"`
	Active    bool   `json:"active"`
	WALStatus string `json:"wal_status"`
	LagBytes  int64  `json:"lag_bytes"`
}

type topicJSON struct {
	Topic          string  `json:"topic"`
	Backlog        int64   `json:"backlog"`
	BacklogAtLeast bool    `json:"backlog_at_least"` // at least Backlog: shown as ≥N
	LagSeconds     float64 `json:"lag_seconds"`
	Dead           int64   `json:"dead"`
	DeadAtLeast    bool    `json:"dead_at_least"`
	Scheduled      int64   `json:"scheduled"`
}

func (c *Console) readOverview(r *http.Request) (overviewData, error) {
	st, err := c.readStatus(r.Context())
	if err != nil {
		return overviewData{}, err
	}
	d := overviewData{
		Backlog: st.Backlog, BacklogEstimated: st.BacklogEstimated, Lag: st.Lag, LagSeconds: st.Lag.Seconds(),
		Dead: st.Dead, DeadEstimated: st.DeadEstimated,
		Scheduled: st.Scheduled, ScheduledEstimated: st.ScheduledEstimated, NextSched: st.NextScheduled,
		Topics: st.Topics, TopicsJSON: []topicJSON{}, NoTopics: st.NoTopics, Unowned: len(st.Unowned), Handovers: len(st.Handovers),
		History: c.hist.points(), At: st.Counted, Status: st.Status,
		PollMillis: c.opts.SampleEvery.Milliseconds(),
	}
	if sl := st.Slot; sl != nil {
		d.Slot = &slotJSON{Name: sl.Name, Active: sl.Active, WALStatus: sl.WALStatus, LagBytes: sl.LagBytes}
	}
	for _, t := range st.Topics {
		d.TopicsJSON = append(d.TopicsJSON, topicJSON{Topic: t.Topic, Backlog: t.Backlog, BacklogAtLeast: t.BacklogAtLeast,
			LagSeconds: t.Lag.Seconds(), Dead: t.Dead, DeadAtLeast: t.DeadAtLeast, Scheduled: t.Scheduled})
	}
	for _, rl := range st.Relays {
		if rl.Alive {
			d.Relays++
		}
	}
	if n := len(d.History); n > 0 {
		d.PublishRate = d.History[n-1].PublishRate
	}
	return d, nil
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	d, err := c.readOverview(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", "overview", d)
}

func (c *Console) overviewJSON(w http.ResponseWriter, r *http.Request) {
	d, err := c.readOverview(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// relayView is a relay as the relays page shows it.
type relayView struct {
	outboxadmin.RelayStatus
	Color int // the palette entry of its shards
}

// shardCell is one square of the shard grid.
type shardCell struct {
	Shard    int
	Owner    string
	Color    int // -1: no live owner
	Handover bool
}

type relaysData struct {
	Relays    []relayView
	Cells     []shardCell
	Unowned   []int
	Handovers []int
}

// paletteSize is the number of owner colours in console.css (.c0 ...).
const paletteSize = 12

func (c *Console) relays(w http.ResponseWriter, r *http.Request) {
	st, err := c.readStatus(r.Context())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := relaysData{Unowned: st.Unowned, Handovers: st.Handovers, Cells: make([]shardCell, 256)}
	for i := range d.Cells {
		d.Cells[i] = shardCell{Shard: i, Color: -1, Handover: slices.Contains(st.Handovers, i)}
	}
	for i, rl := range st.Relays {
		d.Relays = append(d.Relays, relayView{RelayStatus: rl, Color: i % paletteSize})
		for _, s := range rl.Shards {
			if s >= 0 && s < len(d.Cells) {
				d.Cells[s].Owner = rl.ID
				if rl.Alive {
					d.Cells[s].Color = i % paletteSize
				}
			}
		}
	}
	c.render(w, r, http.StatusOK, "relays", "relays", d)
}

// confirmMax is the most events one retry or drop from the console
// changes: the ids go through the confirmation form.
const confirmMax = 1000

// deadPageMax is the dead-letter page's largest page.
const deadPageMax = 500

type deadData struct {
	Query deadQuery
	Rows  []outboxadmin.Row
	Total int64
	Limit int
	After int64
	// Next and First are the query strings of the next and first pages
	// ("" if none); Retry and Drop those of the confirmation pages. They
	// are url.Values.Encode's output, safe in an href as they are.
	Next, First, Retry, Drop template.URL
}

func (c *Console) deadList(w http.ResponseWriter, r *http.Request) {
	v, err := query(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	q, err := parseDeadQuery(v, time.Now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	limit, err := parseLimit(v, outboxadmin.DeadPageDefault, deadPageMax)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	after, err := parseAfter(v)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	rows, total, err := c.listDead(r.Context(), q.filter, after, limit)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := deadData{Query: q, Rows: rows, Total: total, Limit: limit, After: after}
	given := url.Values{}
	for _, k := range []string{"topic", "type", "aggregate", "since", "until", "ids", "limit"} {
		if s := v.Get(k); s != "" {
			given.Set(k, s)
		}
	}
	if len(rows) == limit {
		next := cloneValues(given)
		next.Set("after", strconv.FormatInt(rows[len(rows)-1].ID, 10))
		d.Next = template.URL(next.Encode())
	}
	if after > 0 {
		d.First = template.URL(given.Encode())
	}
	if total > 0 {
		act := q.values()
		if q.filter.IDs != nil {
			act.Set("ids", v.Get("ids"))
		}
		if len(act) == 0 {
			act.Set("all", "1")
		}
		act.Set("action", "retry")
		d.Retry = template.URL(act.Encode())
		act.Set("action", "drop")
		d.Drop = template.URL(act.Encode())
	}
	c.render(w, r, http.StatusOK, "dead", "dead", d)
}

// listDead reads the page of the dead events f selects after the id after
// and counts all of them (up to outboxadmin.CountDeadMax).
func (c *Console) listDead(ctx context.Context, f outboxadmin.Filter, after int64, limit int) ([]outboxadmin.Row, int64, error) {
	rows, err := c.adm.ListDead(ctx, f, after, limit)
	if err != nil {
		return nil, 0, err
	}
	total, err := c.adm.CountDead(ctx, f)
	if err != nil {
		return nil, 0, err
	}
	return rows, total, nil
}

func cloneValues(v url.Values) url.Values {
	out := url.Values{}
	for k, vs := range v {
		out[k] = append([]string(nil), vs...)
	}
	return out
}

// confirmData is the preview of a retry or drop.
type confirmData struct {
	Action  string // "retry" or "drop"
	Query   deadQuery
	Hidden  url.Values // the filter, sent back with the confirmation
	IDs     string     // the previewed ids, which the confirmation changes
	Rows    []outboxadmin.Row
	More    int   // previewed rows not listed
	Count   int   // events the confirmation changes
	Total   int64 // events matching now
	Partial bool  // more match than one confirmation changes
	Missing []int64
}

// shownMax is the most rows a confirmation page lists; every previewed id
// is in its form.
const shownMax = 100

// deadConfirm previews a retry or drop: the dead events the filter selects
// now, at most confirmMax of them. It only reads. The confirmation sends
// their ids back, so it changes exactly what was shown, or nothing if one
// of them changed meanwhile.
func (c *Console) deadConfirm(w http.ResponseWriter, r *http.Request) {
	v, err := query(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	action := v.Get("action")
	if action != "retry" && action != "drop" {
		c.fail(w, r, badf("action: %q is neither retry nor drop", action))
		return
	}
	q, err := parseDeadQuery(v, time.Now())
	if err != nil {
		c.fail(w, r, err)
		return
	}
	if q.filter.IDs == nil && q.values().Encode() == "" && v.Get("all") != "1" {
		c.fail(w, r, errNoSelection)
		return
	}
	rows, total, err := c.listDead(r.Context(), q.filter, 0, confirmMax)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := confirmData{Action: action, Query: q, Hidden: q.values(), Rows: rows, Count: len(rows), Total: total}
	ids := make([]int64, len(rows))
	for i, row := range rows {
		ids[i] = row.ID
	}
	d.IDs = joinIDs(ids)
	if q.filter.IDs != nil {
		found := map[int64]bool{}
		for _, id := range ids {
			found[id] = true
		}
		for _, id := range q.filter.IDs {
			if !found[id] {
				d.Missing = append(d.Missing, id)
			}
		}
	}
	shown := min(len(rows), shownMax)
	d.Rows, d.More, d.Partial = rows[:shown], len(rows)-shown, total > int64(len(rows))
	c.render(w, r, http.StatusOK, "confirm", "dead", d)
}

func joinIDs(ids []int64) string {
	b := make([]byte, 0, len(ids)*8)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(b)
}

type eventsData struct {
	By, Q string
	Rows  []outboxadmin.Row
	// Searched is set once a lookup ran, so "nothing found" can show.
	Searched bool
	Window   int
}

func (c *Console) events(w http.ResponseWriter, r *http.Request) {
	v, err := query(r)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	q, err := text(v, "q")
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := eventsData{By: cmp.Or(v.Get("by"), "id"), Q: q}
	if q == "" {
		c.render(w, r, http.StatusOK, "events", "events", d)
		return
	}
	var lookup outboxadmin.Lookup
	switch d.By {
	case "id":
		id, err := parseID(q, "q")
		if err != nil {
			c.fail(w, r, err)
			return
		}
		http.Redirect(w, r, "events/"+strconv.FormatInt(id, 10), http.StatusSeeOther)
		return
	case "event":
		id, err := uuid.Parse(q)
		if err != nil {
			c.fail(w, r, badf("q: %q is not an event id (a UUID)", q))
			return
		}
		if id == uuid.Nil {
			c.fail(w, r, badf("q: the zero UUID is no event's id"))
			return
		}
		lookup.EventID = id
	case "aggregate":
		lookup.AggregateID = q
	default:
		c.fail(w, r, badf("by: %q is none of id, event, aggregate", d.By))
		return
	}
	if d.Rows, err = c.adm.FindEvents(r.Context(), lookup); err != nil {
		c.fail(w, r, err)
		return
	}
	d.Searched = true
	c.render(w, r, http.StatusOK, "events", "events", d)
}

type eventData struct {
	Row     outboxadmin.Row
	Payload payloadView
	Headers []header
	// RawHeaders are the stored headers when they are not a JSON object
	// of strings (Row.HeadersError), shown as JSON.
	RawHeaders payloadView
}

type header struct{ Key, Value string }

func (c *Console) event(w http.ResponseWriter, r *http.Request) {
	id, err := parseID(r.PathValue("id"), "event ID")
	if err != nil {
		c.fail(w, r, err)
		return
	}
	row, err := c.adm.Event(r.Context(), id)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	d := eventData{Row: row, Payload: viewPayload(row.Payload)}
	if row.RawHeaders != nil {
		d.RawHeaders = viewPayload(row.RawHeaders)
	}
	for k, val := range row.Headers {
		d.Headers = append(d.Headers, header{k, val})
	}
	slices.SortFunc(d.Headers, func(a, b header) int { return cmp.Compare(a.Key, b.Key) })
	c.render(w, r, http.StatusOK, "event", "events", d)
}
