package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/txoutbox/txoutbox/relay/walrelay"
)

// runWALTakeover is `outbox wal takeover`: with the WAL relays stopped, it
// marks published the rows the slot confirmed, leaves the others pending
// and drops the slot. Start the polling relays (`outbox relay`) after it.
func runWALTakeover(ctx context.Context, proc *process, fs *flag.FlagSet, args []string) error {
	stdout := proc.stdout
	var (
		common commonFlags
		slot   = fs.String("slot", "", "replication slot, of this database (default: the WAL relay's, see outbox relay --slot)")
		pub    = fs.String("publication", "", "publication (default: the WAL relay's)")
		force  = fs.Bool("force", false, "drop the slot even if it holds table-less events not yet published (they are lost)")
	)
	common.register(fs)
	if err := proc.parseFlagsOnly(fs, args); err != nil {
		return err
	}
	table, err := common.outboxTable()
	if err != nil {
		return err
	}
	if common.databaseURL == "" {
		return usagef("no database: pass --database-url or set DATABASE_URL")
	}
	res, err := walrelay.Takeover(ctx, common.databaseURL, walrelay.TakeoverConfig{Table: table,
		Slot: *slot, Publication: *pub, Force: *force})
	if errors.Is(err, walrelay.ErrInvalidConfig) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	if common.json {
		return printJSON(stdout, map[string]any{"slot": res.Slot, "confirmed": res.Confirmed, "unconfirmed": res.Unconfirmed,
			"table_less_lost": res.TableLess, "slot_lost": res.Lost})
	}
	if res.Lost {
		fmt.Fprintf(stdout, "the slot was lost: no row could be told confirmed; the polling relay publishes all %d pending rows, some again\n", res.Unconfirmed)
	} else {
		fmt.Fprintf(stdout, "marked %d confirmed rows published; %d rows stay pending for the polling relay\n", res.Confirmed, res.Unconfirmed)
	}
	if res.TableLess > 0 {
		fmt.Fprintf(stdout, "%d table-less events the slot had not confirmed are lost (--force)\n", res.TableLess)
	}
	fmt.Fprintf(stdout, "slot %s dropped: start the polling relays (outbox relay)\n", res.Slot)
	return nil
}
