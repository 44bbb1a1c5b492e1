// Package console is a web console for an outbox: backlog, lag and dead
// count at a glance with a live chart, the relays and their shards, dead
// letters to inspect, retry and drop, event lookup, and replay. It is an
// http.Handler to mount under your own authentication, and the page behind
// `outbox ui`.
//
//	adm, err := outboxadmin.New(db, outboxadmin.Config{})
//	con, err := console.New(adm, console.Options{AllowWrites: true})
//	mux.Handle("/admin/outbox/", http.StripPrefix("/admin/outbox", requireOperator(con)))
//
// Its pages, styles and script are embedded: it needs no internet access,
// no CDN and no Node.js. Links are relative, so it works under any prefix
// that http.StripPrefix removes.
//
// # Safety
//
// The console authenticates nobody: mount it behind the application's
// authentication and authorization. It is read-only unless
// Options.AllowWrites is set, and every page shows which mode it is in.
// Each state-changing request is a POST carrying a CSRF token (the HMAC,
// under a key random to the Console, of a random secret in a SameSite
// cookie), checked before anything else, and refused with 403 without it;
// cross-site browser POSTs are also refused by http.CrossOriginProtection.
// A retry or drop is previewed first (a read) and the confirmation sends
// back the previewed ids, so it changes exactly what was shown, or nothing
// when one of them changed meanwhile (409). Every change is logged with what
// it selected and how many rows it changed. Bad input is answered 400 with a
// message and touches nothing. Database errors are logged and answered with
// a generic message, so no host, role or connection detail reaches the page.
//
// # Cost
//
// Every query uses an index: the overview reads the totals and the
// per-topic figures on the claim and dead-letter partial indexes (their cost
// grows with the backlog and the dead letters, not with the published rows
// retained), the dead-letter list pages through the dead-letter index, and
// event lookups are bounded (see outboxadmin.Admin.FindEvents). Replay's dry
// run is the exception: like `outbox replay`, it reads the published rows.
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
