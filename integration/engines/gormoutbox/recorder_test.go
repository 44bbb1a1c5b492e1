package gormoutbox_test

import (
	"testing"

	"github.com/txoutbox/txoutbox"
	"github.com/txoutbox/txoutbox/gormoutbox"
	"github.com/txoutbox/txoutbox/internal/testkit"
)

// Shipment has a composite key, names its aggregate type and topic, and
// embeds Events without the gorm:"-" tag.
type Shipment struct {
	Carrier  string `gorm:"primaryKey"`
	Tracking string `gorm:"primaryKey"`
	Weight   int
	gormoutbox.Events
}

func (*Shipment) OutboxAggregateType() string { return "parcel" }
func (s *Shipment) OutboxTopic() string       { return "shipping." + s.Carrier }

func TestRecorderAPI(t *testing.T) {
	t.Parallel()
	var e gormoutbox.Events
	e.Record("a.happened", map[string]int{"n": 1})
	e.RecordEvent(txoutbox.Event{Type: "b.happened", AggregateID: "other", Payload: []byte(`1`)})
	p := e.Pending()
	if len(p) != 2 || p[0].Type != "a.happened" || string(p[0].Payload) != `{"n":1}` || p[0].CreatedAt.IsZero() ||
		p[0].AggregateID != "" || p[1].AggregateID != "other" {
		t.Fatalf("Pending = %+v", p)
	}
	p[0].Type = "changed"
	if e.Pending()[0].Type != "a.happened" {
		t.Fatal("Pending returned the recorder's own storage")
	}
	e.Discard()
	if len(e.Pending()) != 0 {
		t.Fatal("Discard left events")
	}
}

func TestCompositeKeyTopicAndAggregateType(t *testing.T) {
	t.Parallel()
	testkit.ForEachEngine(t, func(t *testing.T, eng testkit.Engine) {
		b := setup(t, eng, gormoutbox.Config{}, nil)
		if err := b.db.AutoMigrate(&Shipment{}); err != nil {
			t.Fatal(err)
		}
		s := Shipment{Carrier: "dhl", Tracking: "X1", Weight: 3}
		s.Record("parcel.registered", map[string]int{"weight": 3})
		s.RecordEvent(txoutbox.Event{Topic: "audit", AggregateID: "custom", Type: "parcel.audited", Payload: []byte(`{}`)})
		if err := b.db.Create(&s).Error; err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range b.events() {
			got = append(got, e.String())
		}
		equal(t, "events", got, []string{"shipping.dhl/parcel/dhl:X1/parcel.registered", "audit/parcel/custom/parcel.audited"})
	})
}
