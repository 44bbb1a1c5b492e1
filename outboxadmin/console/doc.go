// Package console is a web console for an outbox: backlog, lag and dead
// count at a glance with a live chart, the relays and their shards, dead
// letters to inspect, retry and drop, event lookup, and replay. It is an
// http.Handler to mount under your own authentication, and the page behind
// `outbox ui`.
//
//	adm, err := outboxadmin.New(db, outboxadmin.Config{})
//	con, err := console.New(adm, console.Options{AllowWrites: true,
//		Hosts: []string{"admin.example.com"}, Authenticate: operatorOf})
//	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", con))
//
// Its pages, styles and script are embedded: it needs no internet access,
// no CDN and no Node.js. Links are relative, so it works under any prefix
// that http.StripPrefix removes.
//
// # Many outboxes
//
// Multi is the console of many outbox tables of one database, a schema
// per tenant say: an index lists every table with its backlog, lag and
// dead count, and each table has its own console, every page and action of
// a Console, under tables/<schema>.<table>/ (a schema whose name is not
// plain quoted as in SQL, and the whole escaped for a URL). It lists its
// tables with a function of yours (relay.FindTables in `outbox ui
// --schemas`) at the first request, then again once
// Options.DiscoverInterval has passed: a new tenant's table appears
// without a restart, and a dropped one's URLs answer 404.
//
//	m, err := console.NewMulti(db, outboxadmin.Config{}, listTenantTables, console.Options{})
//	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", m))
//
// Every request passes the checks below once, the index's too. Each
// table's console acts on its own table only, through an Admin of its own,
// and has a CSRF key of its own: a form of one table's pages is refused
// by another's.
//
// # Security model
//
// The console checks where a request comes from, then who makes it, then
// what it may do:
//
//   - Host and Origin. It answers only to Options.Hosts (by default the
//     loopback names: localhost, *.localhost and loopback IPs), with 421
//     for another Host and 403 for another Origin. A page of another site
//     that rebinds its name to the console's address (DNS rebinding) sends
//     its own name as both, so it can neither read a page nor post a form
//     with a token it read; browser cross-origin checks alone pass such a
//     request, which is same-origin under the attacker's name. Set Hosts
//     to the names the console is served under; "*" accepts any, for a
//     console behind authentication a rebound name does not carry.
//   - Authentication. The console authenticates nobody unless
//     Options.Authenticate is set: a hook for the embedding application's
//     authentication (or TokenAuth, HTTP basic auth against a token, which
//     `outbox ui --token-file` uses). It runs on every request after the
//     Host check; an error answers 401. The operator it returns is named
//     in every change's log line, with the remote address. Without it,
//     mount the console behind the application's authentication. `outbox
//     ui` refuses to listen beyond loopback without --allow-host and either
//     --token-file or --behind-auth-proxy, and to answer any name
//     (--allow-host '*') without one of those two, on loopback too.
//   - Writes. The console is read-only unless Options.AllowWrites is set,
//     and every page shows which mode it is in. Each state-changing
//     request is a POST carrying a CSRF token (the HMAC, under a key random
//     to the Console, of a random secret in a SameSite cookie), checked
//     before anything else, and refused with 403 without it; cross-site
//     browser POSTs are also refused by http.CrossOriginProtection. A retry
//     or drop is previewed first (a read) and the confirmation sends back
//     the previewed ids, so it changes exactly what was shown, or nothing
//     when one of them changed meanwhile (409). Every change is logged
//     with what it selected and how many rows it changed.
//
// Bad input is answered 400 with the reason and touches nothing: a query
// string that does not parse (a raw ";", a bad escape) is refused whole
// rather than losing a filter, and text that PostgreSQL cannot hold (not
// UTF-8, a NUL) is refused before any statement. Database errors are
// logged and answered with a generic message, so no host, role or
// connection detail reaches the page.
//
// Rows are shown whatever they hold. Headers that are not a JSON object of
// strings are shown as stored (outboxadmin.Row.RawHeaders). Control and
// bidirectional characters are shown escaped (\x1b, \u202e), so none can
// reorder the text around it; tables cut long values, and the event's page
// shows them whole up to 64 KiB each (`outbox dead show --full` prints the
// rest). A JSON payload is indented unless that would pass
// 1 MiB (indentation grows with the square of the nesting), then shown
// compact; of one over 256 KiB the page shows the first 4 KiB (as
// `outbox dead show` does past 4 KiB) and how many bytes were cut.
//
// # Cost
//
// Every page and tab shares one status reading per Options.SampleEvery:
// the lag (one entry of the lag index) and the relays every interval, and
// the figures that count rows (backlog, dead count, per topic, handovers;
// each exact up to a cap and estimated or a lower bound beyond, see
// txoutbox.Stats) paced as the relays pace theirs: after a
// reading that took d of 25 ms or more, failed or not, no sooner than
// 100 × d later (a failed recount leaves the last count shown). The
// figures a page shows may be that old after a change; the overview says
// when they were counted. Every query uses an index: the overview reads the
// totals on the claim and dead-letter partial indexes, up to
// txoutbox.StatsExactMax entries each, and the per-topic figures on the
// topic indexes, up to txoutbox.TopicStatsMax entries a topic (an estimate,
// ~N, or a lower bound, ≥N, beyond); the dead-letter list reads its page
// on the index of one of its filters; and event lookups are bounded (see
// outboxadmin.Admin.FindEvents). Replay's dry
// run is the exception: like `outbox replay`, it reads the published rows.
// On MySQL and MariaDB the overview has no per-topic figures
// (outboxadmin.Admin.TopicStats is unsupported there) and says so; the
// other pages are the same.
//
// A Multi's index shows 50 tables a page (filtered by name in memory, ?q=)
// and reads only those, at most 4 at once: each table's backlog, lag and
// dead count in one statement (outboxadmin.Admin.Snapshot: up to
// txoutbox.StatsExactMax entries of each index), at most once per
// SampleEvery per table whoever looks, paced as the counts are when slow,
// and not at all while the table's own overview has a fresh count. A view
// costs at most 50 such statements on 4 connections, and none within
// SampleEvery of the last; tables on other pages cost nothing. Listing the
// tables costs what the list function does, once per DiscoverInterval (and
// at most once a second after a table's page failed, to let a dropped
// table go). A table's overview reads what a Console's does, while it is
// open: a Multi samples no history in the background, so a table's chart
// starts when someone looks at it or the index.
//
// # History
//
// The overview's chart of backlog and lag over the last hour is drawn from
// samples the Console keeps in memory (Options.SampleEvery,
// Options.History): a few kilobytes, lost on restart. Without Run it samples
// only while someone has the overview open; run Run beside the server to
// keep the last hour ready. The publish rate is derived from consecutive
// samples (outboxadmin.PublishRate).
package console
