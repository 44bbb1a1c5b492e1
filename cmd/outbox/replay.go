package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/txoutbox/txoutbox/outboxadmin"
)

func runReplay(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var (
		common    commonFlags
		since     sinceFlag
		topic     = fs.String("topic", "", "only events of this topic")
		aggregate = fs.String("aggregate", "", "only events of this aggregate id")
		dryRun    = fs.Bool("dry-run", false, "count what would be replayed, change nothing")
		slot      = fs.String("slot", "", walSlotHelp)
	)
	common.register(fs)
	fs.Var(&since, "since", "replay events published since: a duration ago (2h) or an RFC 3339 time (required)")
	if err := proc.parseFlagsOnly(fs, args, "since", "topic", "aggregate"); err != nil {
		return err
	}
	if since.t.IsZero() {
		return usagef("--since is required: replay events published since when?")
	}
	if err := textFlag("--topic", *topic); err != nil {
		return err
	}
	if err := textFlag("--aggregate", *aggregate); err != nil {
		return err
	}
	// Even a dry run locks the rows it would change: operator grants.
	adm, db, err := openAdmin(ctx, &common, outboxadmin.Config{Slot: *slot}, operatorGrants)
	if err != nil {
		return err
	}
	defer db.Close()
	res, err := adm.Replay(ctx, outboxadmin.ReplayFilter{Since: since.t, Topic: *topic, AggregateID: *aggregate}, *dryRun)
	if err != nil {
		return err
	}
	if common.json {
		topics := make([]map[string]any, len(res.Topics))
		for i, t := range res.Topics {
			topics[i] = map[string]any{"topic": t.Topic, "events": t.Events}
		}
		return printJSON(stdout, map[string]any{"replayed": res.Events, "first_id": res.FirstID, "last_id": res.LastID,
			"topics": topics, "dry_run": *dryRun})
	}
	verb := "replayed"
	if *dryRun {
		verb = "would replay"
	}
	fmt.Fprintf(stdout, "%s %d event(s)", verb, res.Events)
	if res.Events > 0 {
		fmt.Fprintf(stdout, " (ids %d..%d)", res.FirstID, res.LastID)
		if !*dryRun {
			fmt.Fprint(stdout, ": pending again, the running relays publish them with their original event ids")
		}
	}
	fmt.Fprintln(stdout)
	for _, t := range res.Topics {
		fmt.Fprintf(stdout, "  %s: %d\n", oneLine(t.Topic, 80), t.Events)
	}
	if *dryRun {
		fmt.Fprintln(stdout, "dry run: nothing changed")
	}
	return nil
}
