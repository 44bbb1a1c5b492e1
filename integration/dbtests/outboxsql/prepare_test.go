package outboxsql_test

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/internal/ident"
	"github.com/txoutbox/txoutbox/internal/outboxsql"
	"github.com/txoutbox/txoutbox/internal/testkit"
	"github.com/txoutbox/txoutbox/migrations"
)

// prepared is one statement of the package, rendered for a table.
type prepared struct {
	sql string
	// params is how many parameters its Args type binds, -1 when it has
	// none: the server's count of the statement's parameters must match.
	params int
	// exec: a utility statement (CREATE, COMMENT, LOCK), which the server
	// analyses only when it runs, so it runs in a transaction rolled back.
	exec bool
}

// notStatements are the package's exported names that are no SQL: names,
// helpers that render arguments, and constants.
var notStatements = map[string]bool{
	"ErrInvalidTable": true, "TableNameDefault": true, "NamesFor": true, "Channel": true,
	"InsertParamsPerRow": true, "Interval": true, "Int64Array": true, "Int16Array": true, "TextArray": true,
	"Shards": true, "ShardMask": true, "RebalancePayload": true, "CountCap": true, "CountsOf": true,
	"TopicCountCap": true, "OpsHandoverWindow": true, "WALName": true, "WALLegacyName": true, "Literal": true, "NotBeforeStreamedCode": true, "IsLockNotAvailable": true,
	"DeadIDs": true, "DeadTopic": true, "DeadAggregate": true, "DeadType": true, "DeadSince": true, "DeadUntil": true,
	"DeadForms": true, "ParseBound": true, "RenderPartition": true, "RenderClaimLow": true,
}

// mysqlFiles hold MySQL's statements and the dialect's helpers, which
// PostgreSQL cannot prepare: internal/mysqlgrammar holds every statement
// MySQLStatements lists to MySQL 8's grammar, and the tests run them on
// MariaDB (testkit.MySQLURL).
var mysqlFiles = map[string]bool{"mysql.go": true, "mysql_relay.go": true, "mysql_members.go": true, "mysql_ops.go": true, "mysql_grants.go": true, "mysql_inline.go": true, "mysql_conn.go": true, "dialect.go": true}

// partitionDDL is the partition statements TestPartitionStatementsRun runs
// (through partitions.Convert and partitions.Sweep) rather than one by one:
// each needs the ones before it.
var partitionDDL = map[string]string{
	"PartitionCreate": outboxsql.PartitionCreate, "PartitionAttach": outboxsql.PartitionAttach,
	"PartitionAttachDefault": outboxsql.PartitionAttachDefault, "PartitionLock": outboxsql.PartitionLock,
	"PartitionOwner": outboxsql.PartitionOwner, "PartitionDrop": outboxsql.PartitionDrop,
	"ConvertAddCheck": outboxsql.ConvertAddCheck,
	"ConvertValidate": outboxsql.ConvertValidate, "ConvertDropCheck": outboxsql.ConvertDropCheck,
	"ConvertLock": outboxsql.ConvertLock, "ConvertRename": outboxsql.ConvertRename,
	"ConvertRenameIndex": outboxsql.ConvertRenameIndex, "ConvertRenameConstraint": outboxsql.ConvertRenameConstraint,
	"ConvertDropTrigger": outboxsql.ConvertDropTrigger, "ConvertDropIdentity": outboxsql.ConvertDropIdentity,
	"ConvertCreateParent": outboxsql.ConvertCreateParent, "ConvertParentCheck": outboxsql.ConvertParentCheck,
	"ConvertIdentityAlways": outboxsql.ConvertIdentityAlways, "ConvertIdentityByDef": outboxsql.ConvertIdentityByDef,
	"ConvertAddConstraint": outboxsql.ConvertAddConstraint, "ConvertOwner": outboxsql.ConvertOwner,
	"ConvertAttachFirst": outboxsql.ConvertAttachFirst,
}

// statementsOf lists every statement of the package, in every form, for
// the outbox of n and the inbox of in; the names say which exported name
// each comes from (a form after a slash).
func statementsOf(n, in outboxsql.Names, pub string) map[string]prepared {
	s := map[string]prepared{}
	add := func(name, tmpl string, params int) { s[name] = prepared{sql: n.Render(tmpl), params: params} }
	exec := func(name, sql string) { s[name] = prepared{sql: sql, params: -1, exec: true} }
	count := func(a interface{ Args() []any }) int { return len(a.Args()) }

	// Relay (relay.go).
	add("Claim", outboxsql.Claim, count(outboxsql.ClaimArgs{}))
	add("ClaimSettings", outboxsql.ClaimSettings, count(outboxsql.ClaimSettingsArgs{}))
	add("ClaimFloorStart", outboxsql.ClaimFloorStart, 0)
	add("ClaimFloorPassed", outboxsql.ClaimFloorPassed, len(outboxsql.ClaimFloorProof{}.PassedArgs()))
	add("ClaimFloorRaise", outboxsql.ClaimFloorRaise, len(outboxsql.ClaimFloorProof{}.RaiseArgs()))
	add("ClaimFloorRead", outboxsql.ClaimFloorRead, 0)
	add("RepairRetryAt", outboxsql.RepairRetryAt, count(outboxsql.RepairArgs{}))
	s["ClaimLow"] = prepared{sql: outboxsql.RenderClaimLow(n, []outboxsql.PartitionVars{{Partition: n.Table, From: 1}, {Partition: n.Table, From: 2}}), params: 0}
	add("SettleSettings", outboxsql.SettleSettings, count(outboxsql.TxTimeoutArgs{}))
	add("TxTimeouts", outboxsql.TxTimeouts, count(outboxsql.TxTimeoutArgs{}))
	add("SessionLockTimeout", outboxsql.SessionLockTimeout, count(outboxsql.TimeoutArgs{}))
	exec("LockProbe", n.Render(outboxsql.LockProbe))
	add("LockProbeGates", outboxsql.LockProbeGates, 1)
	add("MarkUndecodable", outboxsql.MarkUndecodable, 2)
	add("ShardsInHandover", outboxsql.ShardsInHandover, count(outboxsql.HandoverArgs{}))
	add("WalkSettings", outboxsql.WalkSettings, count(outboxsql.TxTimeoutArgs{}))
	add("MarkPublished", outboxsql.MarkPublished, count(outboxsql.MarkArgs{}))
	add("Fail", outboxsql.Fail, 2)
	add("Release", outboxsql.Release, count(outboxsql.RowsArgs{}))
	add("NotifyRebalance", outboxsql.NotifyRebalance, 0)
	add("Register", outboxsql.Register, count(outboxsql.RegisterArgs{}))
	add("ReplacePredecessors", outboxsql.ReplacePredecessors, count(outboxsql.ReplaceArgs{}))
	add("OtherIncarnations", outboxsql.OtherIncarnations, count(outboxsql.OtherIncarnationsArgs{}))
	add("Heartbeat", outboxsql.Heartbeat, 1)
	add("ForgetStaleRelays", outboxsql.ForgetStaleRelays, 1)
	add("LiveRelays", outboxsql.LiveRelays, 0)
	add("Schemas", outboxsql.Schemas, count(outboxsql.SchemasArgs{}))
	add("SchemaTables", outboxsql.SchemaTables, count(outboxsql.SchemaTablesArgs{}))
	add("ReleaseShards", outboxsql.ReleaseShards, count(outboxsql.ShardsArgs{}))
	add("AcquireShards", outboxsql.AcquireShards, count(outboxsql.ShardsArgs{}))
	add("OwnedShards", outboxsql.OwnedShards, 1)
	add("LeaveShards", outboxsql.LeaveShards, 1)
	add("LeaveRelay", outboxsql.LeaveRelay, 1)
	add("Prune", outboxsql.Prune, count(outboxsql.PruneArgs{}))
	add("PruneLock", outboxsql.PruneLock, 0)
	add("Stats", outboxsql.Stats, count(outboxsql.CountArgs{}))
	add("StatsLag", outboxsql.StatsLag, 0)
	add("StatsLags", outboxsql.StatsLags, count(outboxsql.CountArgs{}))
	add("StatsBacklog", outboxsql.StatsBacklog, count(outboxsql.CountArgs{}))
	add("StatsDead", outboxsql.StatsDead, count(outboxsql.CountArgs{}))
	add("StatsScheduled", outboxsql.StatsScheduled, count(outboxsql.CountArgs{}))
	add("StatsBacklogScheduled", outboxsql.StatsBacklogScheduled, count(outboxsql.CountArgs{}))
	add("TopicStats", outboxsql.TopicStats, count(outboxsql.CountArgs{}))
	add("BacklogCount", `SELECT `+outboxsql.BacklogCount, count(outboxsql.CountArgs{}))
	add("DeadCount", `SELECT `+outboxsql.DeadCount, count(outboxsql.CountArgs{}))
	add("ScheduledCount", `SELECT `+outboxsql.ScheduledCount, count(outboxsql.CountArgs{}))
	add("OldestUnpublished", `SELECT `+outboxsql.OldestUnpublished, 0)
	add("OldestDue", `SELECT `+outboxsql.OldestDue, count(outboxsql.CountArgs{}))
	add("NextScheduled", `SELECT `+outboxsql.NextScheduled, 0)
	add("PruneSessionLock", outboxsql.PruneSessionLock, 0)
	add("PruneSessionUnlock", outboxsql.PruneSessionUnlock, 0)

	// Partitions (partitions.go). The DDL is run, in order, by
	// TestPartitionStatementsRun, which converts an outbox and drops a
	// partition.
	add("PartitionState", outboxsql.PartitionState, 0)
	add("PartitionTableOwner", outboxsql.PartitionTableOwner, 0)
	add("PartitionList", outboxsql.PartitionList, 0)
	add("PartitionRows", outboxsql.PartitionRows, count(outboxsql.RetentionArgs{}))
	add("PartitionSettings", outboxsql.PartitionSettings, count(outboxsql.PartitionSettingsArgs{}))
	add("ConvertState", outboxsql.ConvertState, 1)
	add("ConvertSequence", outboxsql.ConvertSequence, 1)
	add("ConvertIndexes", outboxsql.ConvertIndexes, 0)
	add("ConvertTriggers", outboxsql.ConvertTriggers, 0)
	add("ConvertGrants", outboxsql.ConvertGrants, 0)
	for name, tmpl := range partitionDDL {
		exec(name, outboxsql.RenderPartition(n, tmpl, outboxsql.PartitionVars{Partition: `"p"`, Object: `"o"`, Def: "d", From: 1, To: 2}))
	}

	// Writers and test helpers (outboxsql.go, outboxtest.go, inbox.go).
	for _, rows := range []int{1, 3} {
		for _, notify := range []bool{false, true} {
			name := fmt.Sprintf("Insert/%d/notify=%t", rows, notify)
			s[name] = prepared{sql: outboxsql.Insert(n, rows, notify), params: rows * outboxsql.InsertParamsPerRow}
		}
		s[fmt.Sprintf("WALEmit/%d", rows)] = prepared{sql: outboxsql.WALEmit(rows), params: rows + 1}
	}
	add("InsertColumns", `SELECT `+outboxsql.InsertColumns+` FROM {{table}}`, 0)
	add("TestEvents", outboxsql.TestEvents, 0)
	add("TestDrainable", outboxsql.TestDrainable, count(outboxsql.TestDrainArgs{}))
	add("TestAdvance", outboxsql.TestAdvance, count(outboxsql.TestDrainArgs{}))
	s["InboxClaim"] = prepared{sql: in.Render(outboxsql.InboxClaim), params: 2}
	s["InboxPrune"] = prepared{sql: in.Render(outboxsql.InboxPrune), params: 2}

	// Operators (ops.go).
	add("StateColumn", `SELECT `+outboxsql.StateColumn+` FROM {{table}}`, 0)
	for f := range outboxsql.DeadForms {
		form := fmt.Sprintf("/%06b", f)
		add("OpsDeadList"+form, outboxsql.OpsDeadList(outboxsql.DeadFilters(f)), count(outboxsql.DeadListArgs{}))
		add("OpsDeadCount"+form, outboxsql.OpsDeadCount(outboxsql.DeadFilters(f)), count(outboxsql.DeadCountArgs{}))
		add("OpsDeadLock"+form, outboxsql.OpsDeadLock(outboxsql.DeadFilters(f)), count(outboxsql.DeadArgs{}))
	}
	add("OpsRow", outboxsql.OpsRow, 1)
	add("OpsLockUnpublished", outboxsql.OpsLockUnpublished, 1)
	add("OpsRetry", outboxsql.OpsRetry, 1)
	add("OpsLowerFloor", outboxsql.OpsLowerFloor, 1)
	add("OpsDrop", outboxsql.OpsDrop, 1)
	add("OpsWake", outboxsql.OpsWake, 0)
	add("OpsPruneLock", outboxsql.OpsPruneLock, 0)
	add("OpsReplaySelect", outboxsql.OpsReplaySelect, count(outboxsql.ReplaySelectArgs{}))
	add("OpsReplay", outboxsql.OpsReplay, 1)
	add("OpsClaimGate", outboxsql.OpsClaimGate, 0)
	add("OpsWALGate", outboxsql.OpsWALGate, 1)
	add("OpsWALSlots", outboxsql.OpsWALSlots, count(outboxsql.WALSlotsArgs{}))
	add("RelayWALSlots", outboxsql.RelayWALSlots, count(outboxsql.WALSlotsArgs{}))
	add("OpsTimeouts", outboxsql.OpsTimeouts, count(outboxsql.TimeoutArgs{}))
	add("OpsRelays", outboxsql.OpsRelays, 0)
	add("OpsLocks", outboxsql.OpsLocks, 0)
	add("OpsShards", outboxsql.OpsShards, 0)
	add("OpsHandovers", outboxsql.OpsHandovers, 1)
	add("OpsSnapshot", outboxsql.OpsSnapshot, count(outboxsql.CountArgs{}))
	add("OpsSnapshotScheduled", outboxsql.OpsSnapshotScheduled, count(outboxsql.CountArgs{}))
	add("OpsLookupAggregate", outboxsql.OpsLookupAggregate, count(outboxsql.LookupArgs{}))
	add("OpsLookupEventID", outboxsql.OpsLookupEventID, count(outboxsql.LookupArgs{}))

	// The WAL relay (wal.go).
	add("WALMessagePrefix", outboxsql.WALMessagePrefix, 1)
	add("WALServer", outboxsql.WALServer, 0)
	add("WALPublication", outboxsql.WALPublication, 1)
	add("WALSlot", outboxsql.WALSlot, 1)
	add("WALDropSlot", outboxsql.WALDropSlot, 1)
	add("WALInitLock", outboxsql.WALInitLock, 1)
	add("WALInitUnlock", outboxsql.WALInitUnlock, 1)
	add("WALSlotGate", outboxsql.WALSlotGate, 1)
	add("WALSlotUngate", outboxsql.WALSlotUngate, 1)
	add("WALColumns", `SELECT `+outboxsql.WALColumns+` FROM {{table}}`, 0)
	add("WALBacklog", outboxsql.WALBacklog, count(outboxsql.BacklogArgs{}))
	add("WALMarkPublished", outboxsql.WALMarkPublished, 1)
	add("WALMarkDead", outboxsql.WALMarkDead, count(outboxsql.MarkDeadArgs{}))
	add("WALRowExists", outboxsql.WALRowExists, 1)
	add("WALHorizon", outboxsql.WALHorizon, 0)
	add("WALHorizonPassed", outboxsql.WALHorizonPassed, 1)
	add("WALDeleteConfirmed", outboxsql.WALDeleteConfirmed, count(outboxsql.ConfirmedArgs{}))
	add("WALMarkConfirmed", outboxsql.WALMarkConfirmed, count(outboxsql.ConfirmedArgs{}))
	add("WALCleanupFloor", outboxsql.WALCleanupFloor, 1)
	add("WALPeek", outboxsql.WALPeek, count(outboxsql.PeekArgs{}))
	add("WALFlush", outboxsql.WALFlush, 0)
	add("WALUnpublished", outboxsql.WALUnpublished, 0)
	add("WALTakeoverTimeout", outboxsql.WALTakeoverTimeout, count(outboxsql.TimeoutArgs{}))
	add("WALMarkAllBut", outboxsql.WALMarkAllBut, 1)
	add("WALSettled", outboxsql.WALSettled, 1)
	add("WALPosition", outboxsql.WALPosition, 0)
	add("WALSettledMax", outboxsql.WALSettledMax, 0)
	add("WALDeadMax", outboxsql.WALDeadMax, 0)
	add("WALHighestRow", outboxsql.WALHighestRow, 0)
	add("WALSettledMaxSettings", outboxsql.WALSettledMaxSettings, 0)
	add("WALPublicationCheck/lists", outboxsql.WALPublicationCheck(true), count(outboxsql.PublicationCheckArgs{}))
	add("WALPublicationCheck/nolists", outboxsql.WALPublicationCheck(false), count(outboxsql.PublicationCheckArgs{}))
	add("WALCeiling", outboxsql.WALCeiling, count(outboxsql.CeilingArgs{}))
	add("WALTable", outboxsql.WALTable, 1)
	add("WALNames", outboxsql.WALNames, count(outboxsql.NamesArgs{}))
	add("WALNameOf", outboxsql.WALNameOf, 1)
	add("WALPollingRelays", outboxsql.WALPollingRelays, 1)
	add("WALScheduled", outboxsql.WALScheduled, 0)
	exec("WALTakeoverLock", n.Render(outboxsql.WALTakeoverLock))
	exec("WALCreatePublication/columns", outboxsql.WALCreatePublication(n, pub, true))
	exec("WALCreatePublication/all", outboxsql.WALCreatePublication(n, pub, false))
	exec("WALSetMarker/set", outboxsql.WALSetMarker(pub, "txoutbox: slot s"))
	exec("WALSetMarker/clear", outboxsql.WALSetMarker(pub, ""))
	exec("WALDropPublication", outboxsql.WALDropPublication(pub))
	return s
}

// TestEveryStatementPrepares prepares every statement of the package, in
// every form, against a freshly migrated schema, so a typo, a dropped
// column or an Args type that binds a different number of parameters than
// its statement takes fails here rather than in a relay. It also fails
// when an exported name of the package is neither listed here nor known
// as no SQL. The schema's name holds what an identifier, a string literal,
// a dollar-quoted body and a format() string would each take for their
// own syntax: every statement must quote it as an identifier, or pass it
// as a literal, whatever it holds.
func TestEveryStatementPrepares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := testkit.NewDB(t)
	schema := d.Schema + `_q"x'$$%s; --`
	t.Cleanup(func() { d.SQL.Exec(`DROP SCHEMA IF EXISTS ` + ident.Quote(schema) + ` CASCADE`) }) //nolint:errcheck // best effort
	for _, set := range []migrations.Set{migrations.Outbox, migrations.Inbox} {
		m, err := migrations.New(d.SQL, migrations.Config{Set: set, Table: txoutbox.Table{Schema: schema}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n, err := outboxsql.NamesFor(schema, "")
	if err != nil {
		t.Fatal(err)
	}
	in, err := outboxsql.NamesFor(schema, "inbox")
	if err != nil {
		t.Fatal(err)
	}
	pub := strings.ToLower("p_" + d.Schema)
	stmts := statementsOf(n, in, pub)

	for _, name := range exportedNames(t) {
		if notStatements[name] {
			continue
		}
		if _, ok := stmts[name]; ok {
			continue
		}
		found := false
		for k := range stmts {
			found = found || strings.HasPrefix(k, name+"/")
		}
		if !found {
			t.Errorf("%s: neither a statement TestEveryStatementPrepares prepares nor listed in notStatements", name)
		}
	}

	conn, err := pgx.Connect(ctx, d.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The utility statements run in order (the publication first, then its
	// comment), in one transaction, rolled back.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, name := range []string{"WALCreatePublication/columns", "WALSetMarker/set", "WALSetMarker/clear", "WALTakeoverLock", "LockProbe"} {
		if _, err := tx.Exec(ctx, "SAVEPOINT s"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, stmts[name].sql); err != nil {
			t.Errorf("%s: %v\n%s", name, err, stmts[name].sql)
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT s"); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := tx.Exec(ctx, stmts["WALDropPublication"].sql); err != nil {
		t.Fatalf("WALDropPublication: %v", err)
	}
	if _, err := tx.Exec(ctx, stmts["WALCreatePublication/all"].sql); err != nil {
		t.Errorf("WALCreatePublication/all: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	for name, st := range stmts {
		if st.exec {
			continue
		}
		desc, err := conn.Prepare(ctx, "", st.sql)
		if err != nil {
			t.Errorf("%s: %v\n%s", name, err, st.sql)
			continue
		}
		if st.params >= 0 && len(desc.ParamOIDs) != st.params {
			t.Errorf("%s: the statement takes %d parameters, its arguments bind %d", name, len(desc.ParamOIDs), st.params)
		}
	}
}

// outboxsqlDir is package outboxsql's directory, from this one.
var outboxsqlDir = filepath.Join("..", "..", "..", "internal", "outboxsql")

// exportedNames lists the exported constants, variables and functions the
// package's own files declare (methods and types are no statements).
func exportedNames(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(outboxsqlDir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("%d Go files in %s: not package outboxsql's directory", len(files), outboxsqlDir)
	}
	var names []string
	fset := token.NewFileSet()
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") || mysqlFiles[filepath.Base(file)] {
			continue
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, file, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil && decl.Name.IsExported() {
					names = append(names, decl.Name.Name)
				}
			case *ast.GenDecl:
				if decl.Tok != token.CONST && decl.Tok != token.VAR {
					continue
				}
				for _, spec := range decl.Specs {
					for _, id := range spec.(*ast.ValueSpec).Names {
						if id.IsExported() {
							names = append(names, id.Name)
						}
					}
				}
			}
		}
	}
	return names
}
