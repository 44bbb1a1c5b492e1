package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/txoutbox/internal/human"
	"github.com/txoutbox/txoutbox/outboxadmin"
)

func runDeadList(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var (
		common  commonFlags
		filters filterFlags
		limit   = fs.Int("limit", outboxadmin.DeadPageDefault, fmt.Sprintf("events per page, at most %d", outboxadmin.DeadPageMax))
		after   = fs.Int64("after", 0, "list events with an ID above this (the next page: the last ID shown)")
	)
	common.register(fs)
	filters.register(fs)
	if err := proc.parseFlagsOnly(fs, args); err != nil {
		return err
	}
	if *limit < 1 || *limit > outboxadmin.DeadPageMax {
		return usagef("--limit %d is outside 1..%d", *limit, outboxadmin.DeadPageMax)
	}
	if *after < 0 {
		return usagef("--after %d is negative", *after)
	}
	if err := filters.check(); err != nil {
		return err
	}
	adm, db, err := openAdmin(ctx, &common, outboxadmin.Config{}, readerGrants)
	if err != nil {
		return err
	}
	defer db.Close()
	rows, err := adm.ListDead(ctx, filters.filter(nil), *after, *limit)
	if err != nil {
		return err
	}
	var next *int64
	if len(rows) == *limit {
		next = &rows[len(rows)-1].ID
	}
	if common.json {
		events := make([]rowOutput, len(rows))
		for i, r := range rows {
			events[i] = rowJSON(r)
		}
		return printJSON(stdout, map[string]any{"events": events, "next_after": next})
	}
	if len(rows) == 0 {
		fmt.Fprintln(stdout, "no dead events")
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOPIC\tAGGREGATE\tTYPE\tCREATED\tATTEMPTS\tLAST ERROR")
	for _, r := range rows {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, oneLine(r.Topic, 60), oneLine(r.AggregateID, 40), oneLine(r.Type, 60),
			r.CreatedAt.UTC().Format(timeUTC), r.Attempts, oneLine(r.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(stdout, "more: add --after %d\n", *next)
	}
	return nil
}

func runDeadShow(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var common commonFlags
	common.register(fs)
	full := fs.Bool("full", false, fmt.Sprintf("show every value and the payload whole (default: values past %d characters and payloads past %d bytes are cut)",
		shownMax, human.PayloadHead))
	positional, err := proc.parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(positional) != 1 {
		return usagef("want one event ID, got %d arguments", len(positional))
	}
	ids, err := parseIDs(positional)
	if err != nil {
		return err
	}
	adm, db, err := openAdmin(ctx, &common, outboxadmin.Config{}, readerGrants)
	if err != nil {
		return err
	}
	defer db.Close()
	r, err := adm.Event(ctx, ids[0])
	if err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, rowJSON(r))
	}
	return printRow(stdout, r, *full)
}

// shownMax is the most characters of a value (a header, the last error)
// dead show prints without --full: a dozen lines of a terminal. The
// payload, the value read most, gets more: its first human.PayloadHead
// bytes, as the console shows a payload too large for its page.
const shownMax = 1000

// timeUTC is how times are printed for humans: UTC, saying so, as the
// console does.
const timeUTC = "2006-01-02 15:04:05Z"

// printRow writes r for humans. Every value from the database is escaped
// (human.Escape), so none can drive the terminal, and cut unless full: at
// shownMax characters, the payload at human.PayloadHead bytes.
func printRow(w io.Writer, r outboxadmin.Row, full bool) error {
	cut := 0
	show := func(s string) string {
		s = human.Escape(s)
		if full {
			return s
		}
		s, clipped := human.Clip(s, shownMax)
		if clipped {
			cut++
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%d\n", r.ID)
	fmt.Fprintf(tw, "event id\t%s\n", r.EventID)
	fmt.Fprintf(tw, "state\t%s\n", r.State)
	fmt.Fprintf(tw, "topic\t%s\n", show(r.Topic))
	fmt.Fprintf(tw, "aggregate\t%s %s\n", show(r.AggregateType), show(r.AggregateID))
	fmt.Fprintf(tw, "type\t%s\n", show(r.Type))
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.UTC().Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "attempts\t%d\n", r.Attempts)
	if r.State == "pending" || r.State == "claimed" {
		fmt.Fprintf(tw, "next attempt\t%s\n", r.NextAttemptAt.UTC().Format(time.RFC3339Nano))
	}
	if r.PublishedAt != nil {
		fmt.Fprintf(tw, "published\t%s\n", r.PublishedAt.UTC().Format(time.RFC3339Nano))
	}
	if r.LeaseOwner != "" {
		fmt.Fprintf(tw, "claimed by\t%s\n", show(r.LeaseOwner))
	}
	fmt.Fprintf(tw, "last error\t%s\n", show(r.LastError))
	if r.HeadersError != "" {
		fmt.Fprintf(tw, "headers\t%s; as stored: %s\n", r.HeadersError, show(string(r.RawHeaders)))
	} else {
		names := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		fmt.Fprintf(tw, "headers\t%d\n", len(names))
		for _, k := range names {
			fmt.Fprintf(tw, "  %s\t%s\n", show(k), show(r.Headers[k]))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	whole := human.PayloadHead
	if full {
		whole = math.MaxInt
	}
	p := human.ShowPayload(r.Payload, whole)
	// The form is said when it is not what the content type leads one to
	// expect: a hex dump, JSON printed compact.
	how := ""
	if p.Kind != "json" && p.Kind != "text" {
		how = ", " + strings.TrimPrefix(p.Kind, "json, ")
	}
	if p.Cut > 0 {
		how += fmt.Sprintf(", the first %d shown", len(r.Payload)-p.Cut)
	}
	fmt.Fprintf(w, "payload (%s, %d bytes%s):\n%s\n", show(r.ContentType), r.PayloadBytes, how, human.EscapeLines(p.Text))
	if p.Cut > 0 {
		fmt.Fprintf(w, "(payload cut: %d of %d bytes not shown; --full prints it whole, --json as JSON or base64)\n", p.Cut, len(r.Payload))
	}
	if cut > 0 {
		fmt.Fprintf(w, "(%d value(s) cut at %d characters: --full shows them whole)\n", cut, shownMax)
	}
	return nil
}

// selectionFlags choose or confirm what retry and drop change: read from
// the command line only (see applyEnv).
var selectionFlags = []string{"all", "yes", "topic", "aggregate", "type", "since"}

// walSlotHelp is the --slot flag of the commands that return rows to
// pending, which refuse while the WAL relay's slot exists.
const walSlotHelp = "the WAL relay's replication slot (its --slot): retry and replay refuse while it exists in this database (default: the relay's default name; a slot named as a publication of the table is found anyway)"

// maxListed bounds the events retry and drop list for humans.
const maxListed = 50

// runDeadChange is retry and drop: the same selection, a different change.
func runDeadChange(ctx context.Context, proc *process, fs *flag.FlagSet, action string, args []string) error {
	stdout := proc.stdout
	var (
		common  commonFlags
		filters filterFlags
		all     = fs.Bool("all", false, "select every dead event (when no IDs or filters are given)")
		dryRun  = fs.Bool("dry-run", false, "show what would change, change nothing")
		slot    = fs.String("slot", "", walSlotHelp)
		yes     *bool
	)
	common.register(fs)
	filters.register(fs)
	if action == "drop" {
		yes = fs.Bool("yes", false, "really delete: dropped events are gone for good")
	}
	positional, err := proc.parseInterleaved(fs, args, selectionFlags...)
	if err != nil {
		return err
	}
	ids, err := parseIDs(positional)
	if err != nil {
		return err
	}
	if err := filters.check(); err != nil {
		return err
	}
	f := filters.filter(ids)
	selected := ids != nil || f.Topic != "" || f.AggregateID != "" || f.Type != "" || !f.Since.IsZero()
	switch {
	case !selected && !*all:
		return usagef("say which events: give IDs, a filter (--topic, --aggregate, --type, --since) or --all")
	case selected && *all:
		return usagef("--all cannot be combined with IDs or filters")
	case yes != nil && !*yes && !*dryRun:
		return usagef("dropping deletes events for good: pass --yes (or --dry-run to see what would be dropped)")
	}
	f.All = *all
	// Even a dry run locks the rows it would change: operator grants.
	adm, db, err := openAdmin(ctx, &common, outboxadmin.Config{Slot: *slot}, operatorGrants)
	if err != nil {
		return err
	}
	defer db.Close()

	var (
		rows      []outboxadmin.Row
		overtaken = map[int64][]int64{}
	)
	if action == "retry" {
		retried, err := adm.Retry(ctx, f, *dryRun)
		if err != nil {
			return err
		}
		for _, r := range retried {
			rows = append(rows, r.Row)
			if len(r.Overtaken) > 0 {
				overtaken[r.ID] = r.Overtaken
			}
		}
	} else {
		rows, err = adm.Drop(ctx, f, *dryRun)
		if err != nil {
			return err
		}
	}

	if common.json {
		events := make([]rowOutput, len(rows))
		for i, r := range rows {
			events[i] = rowJSON(r)
			events[i].Payload = nil
			events[i].Overtaken = overtaken[r.ID]
		}
		key := map[string]string{"retry": "retried", "drop": "dropped"}[action]
		return printJSON(stdout, map[string]any{key: events, "dry_run": *dryRun})
	}
	verb := map[string]string{"retry": "retried", "drop": "dropped"}[action]
	if *dryRun {
		verb = "would " + action
	}
	fmt.Fprintf(stdout, "%s %d dead event(s)", verb, len(rows))
	if action == "retry" && len(rows) > 0 && !*dryRun {
		fmt.Fprint(stdout, ": pending now, a running relay publishes them")
	}
	fmt.Fprintln(stdout)
	if len(rows) > 0 {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tEVENT ID\tTOPIC\tAGGREGATE\tTYPE")
		for _, r := range rows[:min(len(rows), maxListed)] {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.ID, r.EventID, oneLine(r.Topic, 60), oneLine(r.AggregateID, 40), oneLine(r.Type, 60))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if len(rows) > maxListed {
			fmt.Fprintf(stdout, "... and %d more (--json lists them all)\n", len(rows)-maxListed)
		}
	}
	for _, r := range rows {
		if later := overtaken[r.ID]; len(later) > 0 {
			fmt.Fprintf(stdout, "note: %d later event(s) of aggregate %q were already in flight and may be published before %d: %s\n",
				len(later), oneLine(r.AggregateID, 80), r.ID, joinIDs(later))
		}
	}
	if *dryRun {
		fmt.Fprintln(stdout, "dry run: nothing changed")
	}
	return nil
}

// rowOutput is a row in --json output. A JSON payload (in UTF-8) is
// embedded as JSON, any other as base64 (PayloadBase64).
type rowOutput struct {
	ID            int64             `json:"id"`
	EventID       string            `json:"event_id"`
	State         string            `json:"state"`
	Topic         string            `json:"topic"`
	AggregateType string            `json:"aggregate_type"`
	AggregateID   string            `json:"aggregate_id"`
	Type          string            `json:"event_type"`
	ContentType   string            `json:"content_type"`
	PayloadBytes  int               `json:"payload_bytes"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64 []byte            `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers"`
	// HeadersRaw and HeadersError: headers that are not a JSON object of
	// strings, as stored, and why (Headers is then null).
	HeadersRaw    json.RawMessage `json:"headers_raw,omitempty"`
	HeadersError  string          `json:"headers_error,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
	Attempts      int             `json:"attempts"`
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	LastError     string          `json:"last_error"`
	PublishedAt   *time.Time      `json:"published_at,omitempty"`
	LeaseOwner    string          `json:"lease_owner,omitempty"`
	Overtaken     []int64         `json:"overtaken_by,omitempty"`
}

func rowJSON(r outboxadmin.Row) rowOutput {
	out := rowOutput{
		ID: r.ID, EventID: r.EventID.String(), State: r.State, Topic: r.Topic, AggregateType: r.AggregateType,
		AggregateID: r.AggregateID, Type: r.Type, ContentType: r.ContentType, PayloadBytes: r.PayloadBytes,
		Headers: r.Headers, HeadersRaw: r.RawHeaders, HeadersError: r.HeadersError, CreatedAt: r.CreatedAt, Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt,
		LastError: r.LastError, PublishedAt: r.PublishedAt, LeaseOwner: r.LeaseOwner,
	}
	if r.Payload != nil {
		// encoding/json takes JSON that is not UTF-8 as valid, and would
		// copy its bytes (0x9b, the 8-bit CSI) to the output as they are.
		if len(r.Payload) > 0 && json.Valid(r.Payload) && utf8.Valid(r.Payload) {
			out.Payload = r.Payload
		} else {
			out.PayloadBase64 = r.Payload
		}
	}
	return out
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}
