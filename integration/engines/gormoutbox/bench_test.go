package gormoutbox_test

import (
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// benchDBs opens two GORM handles on one migrated schema: one without the
// plugin, one with it.
func benchDBs(b *testing.B) (off, on *gorm.DB) {
	tk := testkit.NewOutbox(b)
	open := func() *gorm.DB {
		db, err := gorm.Open(postgres.Open(tk.URL), &gorm.Config{Logger: logger.Discard})
		if err != nil {
			b.Fatal(err)
		}
		closeDB(b, db)
		return db
	}
	off = open()
	if err := off.AutoMigrate(&Order{}); err != nil {
		b.Fatal(err)
	}
	on = open()
	p, err := gormoutbox.New(gormoutbox.Config{Writer: txoutbox.WriterConfig{Table: tk.Table()}, DefaultTopic: "orders"})
	if err != nil {
		b.Fatal(err)
	}
	if err := on.Use(p); err != nil {
		b.Fatal(err)
	}
	return off, on
}

func createOrder(b *testing.B, db *gorm.DB) {
	o := Order{Total: 1250}
	o.Place()
	if err := db.Create(&o).Error; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkCreateOverhead alternates the two Creates of BenchmarkCreate in
// one loop, so load from elsewhere on the machine hits both alike, and
// reports each one's time and their ratio (on/off).
func BenchmarkCreateOverhead(b *testing.B) {
	off, on := benchDBs(b)
	var tOff, tOn time.Duration
	n := 0
	for b.Loop() {
		start := time.Now()
		createOrder(b, off)
		mid := time.Now()
		createOrder(b, on)
		tOff += mid.Sub(start)
		tOn += time.Since(mid)
		n++
	}
	b.ReportMetric(float64(tOff.Nanoseconds())/float64(n), "off-ns/create")
	b.ReportMetric(float64(tOn.Nanoseconds())/float64(n), "on-ns/create")
	b.ReportMetric(float64(tOn)/float64(tOff), "on/off")
}

// BenchmarkCreate measures the write-path overhead of the plugin: Create of
// one order recording one event, in GORM's default single-statement
// transaction, with the plugin on and off, on the same database in one run.
//
//	go test -run '^$' -bench Create -count 5 ./gormoutbox/
func BenchmarkCreate(b *testing.B) {
	off, on := benchDBs(b)
	for _, bc := range []struct {
		name string
		db   *gorm.DB
	}{{"plugin=off", off}, {"plugin=on", on}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				createOrder(b, bc.db)
			}
		})
	}
}
