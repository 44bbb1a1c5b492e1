package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

func init() {
	commands["dead"] = command{summary: "list, show, retry or drop dead events", run: runDead}
}

func runDead(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usagef("want a subcommand: list, show, retry or drop")
	}
	switch args[0] {
	case "list":
		return runDeadList(ctx, args[1:], stdout)
	case "show":
		return runDeadShow(ctx, args[1:], stdout)
	case "retry":
		return runDeadChange(ctx, "retry", args[1:], stdout)
	case "drop":
		return runDeadChange(ctx, "drop", args[1:], stdout)
	}
	return usagef("unknown subcommand %q: want list, show, retry or drop", args[0])
}

func runDeadList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outbox dead list", flag.ContinueOnError)
	var (
		common  commonFlags
		filters filterFlags
		limit   = fs.Int("limit", outboxadmin.DeadPageDefault, fmt.Sprintf("events per page, at most %d", outboxadmin.DeadPageMax))
		after   = fs.Int64("after", 0, "list events with an ID above this (the next page: the last ID shown)")
	)
	common.register(fs)
	filters.register(fs)
	if err := parseFlags(ctx, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments: %v", fs.Args())
	}
	if *limit < 1 || *limit > outboxadmin.DeadPageMax {
		return usagef("--limit %d is outside 1..%d", *limit, outboxadmin.DeadPageMax)
	}
	if *after < 0 {
		return usagef("--after %d is negative", *after)
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
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", r.ID, r.Topic, oneLine(r.AggregateID, 40), r.Type,
			r.CreatedAt.Local().Format(time.DateTime), r.Attempts, oneLine(r.LastError, 60))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != nil {
		fmt.Fprintf(stdout, "more: add --after %d\n", *next)
	}
	return nil
}

func runDeadShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outbox dead show", flag.ContinueOnError)
	var common commonFlags
	common.register(fs)
	positional, err := parseInterleaved(ctx, fs, args)
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
	if errors.Is(err, outboxadmin.ErrNotFound) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, rowJSON(r))
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "id\t%d\n", r.ID)
	fmt.Fprintf(tw, "event id\t%s\n", r.EventID)
	fmt.Fprintf(tw, "state\t%s\n", r.State)
	fmt.Fprintf(tw, "topic\t%s\n", r.Topic)
	fmt.Fprintf(tw, "aggregate\t%s %s\n", r.AggregateType, r.AggregateID)
	fmt.Fprintf(tw, "type\t%s\n", r.Type)
	fmt.Fprintf(tw, "created\t%s\n", r.CreatedAt.Format(time.RFC3339Nano))
	fmt.Fprintf(tw, "attempts\t%d\n", r.Attempts)
	if r.PublishedAt != nil {
		fmt.Fprintf(tw, "published\t%s\n", r.PublishedAt.Format(time.RFC3339Nano))
	}
	if r.LeaseOwner != "" {
		fmt.Fprintf(tw, "claimed by\t%s\n", r.LeaseOwner)
	}
	fmt.Fprintf(tw, "last error\t%s\n", r.LastError)
	names := make([]string, 0, len(r.Headers))
	for k := range r.Headers {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(tw, "headers\t%d\n", len(names))
	for _, k := range names {
		fmt.Fprintf(tw, "  %s\t%s\n", k, r.Headers[k])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "payload (%s, %d bytes):\n%s\n", r.ContentType, r.PayloadBytes, payloadText(r))
	return nil
}

// selectionFlags choose or confirm what retry and drop change: read from
// the command line only (see applyEnv).
var selectionFlags = []string{"all", "yes", "topic", "aggregate", "type", "since"}

// walSlotHelp is the --slot flag of the commands that return rows to
// pending, which refuse while the WAL relay's slot exists.
const walSlotHelp = "the WAL relay's replication slot (its --slot): retry and replay refuse while it exists (default txoutbox_<schema>_<table>; a slot named as a publication of the table is found anyway)"

// maxListed bounds the events retry and drop list for humans.
const maxListed = 50

// runDeadChange is retry and drop: the same selection, a different change.
func runDeadChange(ctx context.Context, action string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("outbox dead "+action, flag.ContinueOnError)
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
	positional, err := parseInterleaved(ctx, fs, args, selectionFlags...)
	if err != nil {
		return err
	}
	ids, err := parseIDs(positional)
	if err != nil {
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
		if errors.Is(err, outboxadmin.ErrNotDead) {
			return usagef("%v", err)
		}
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
		if errors.Is(err, outboxadmin.ErrNotDead) {
			return usagef("%v", err)
		}
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
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", r.ID, r.EventID, r.Topic, oneLine(r.AggregateID, 40), r.Type)
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
				len(later), r.AggregateID, r.ID, joinIDs(later))
		}
	}
	if *dryRun {
		fmt.Fprintln(stdout, "dry run: nothing changed")
	}
	return nil
}

// rowOutput is a row in --json output. A JSON payload is embedded as JSON,
// any other as base64 (PayloadBase64).
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
	CreatedAt     time.Time         `json:"created_at"`
	Attempts      int               `json:"attempts"`
	NextAttemptAt time.Time         `json:"next_attempt_at"`
	LastError     string            `json:"last_error"`
	PublishedAt   *time.Time        `json:"published_at,omitempty"`
	LeaseOwner    string            `json:"lease_owner,omitempty"`
	Overtaken     []int64           `json:"overtaken_by,omitempty"`
}

func rowJSON(r outboxadmin.Row) rowOutput {
	out := rowOutput{
		ID: r.ID, EventID: r.EventID.String(), State: r.State, Topic: r.Topic, AggregateType: r.AggregateType,
		AggregateID: r.AggregateID, Type: r.Type, ContentType: r.ContentType, PayloadBytes: r.PayloadBytes,
		Headers: r.Headers, CreatedAt: r.CreatedAt, Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt,
		LastError: r.LastError, PublishedAt: r.PublishedAt, LeaseOwner: r.LeaseOwner,
	}
	if r.Payload != nil {
		if json.Valid(r.Payload) && len(r.Payload) > 0 {
			out.Payload = r.Payload
		} else {
			out.PayloadBase64 = r.Payload
		}
	}
	return out
}

// payloadText renders a payload for humans: indented if JSON, as is if
// printable text, else a hex dump.
func payloadText(r outboxadmin.Row) string {
	var b bytes.Buffer
	if json.Indent(&b, r.Payload, "", "  ") == nil {
		return b.String()
	}
	if isPrintable(r.Payload) {
		return string(r.Payload)
	}
	return fmt.Sprintf("% x", r.Payload)
}

func isPrintable(p []byte) bool {
	if !utf8.Valid(p) {
		return false
	}
	for _, c := range string(p) {
		if c < 0x20 && c != '\n' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}
