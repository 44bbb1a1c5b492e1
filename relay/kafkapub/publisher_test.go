package kafkapub_test

import (
	"strings"
	"testing"

	"github.com/txoutbox/txoutbox/relay/kafkapub"
)

func TestNewPublisherValidatesConfig(t *testing.T) {
	t.Parallel()
	if _, err := kafkapub.NewPublisher(nil, kafkapub.Config{}); err == nil || !strings.Contains(err.Error(), "no brokers") {
		t.Errorf("NewPublisher(nil) = %v", err)
	}
	if _, err := kafkapub.NewPublisher([]string{"127.0.0.1:1"}, kafkapub.Config{SASL: kafkapub.SASLConfig{Mechanism: "GSSAPI"}}); err == nil ||
		!strings.Contains(err.Error(), `unsupported SASL mechanism "GSSAPI"`) {
		t.Errorf("NewPublisher(GSSAPI) = %v", err)
	}
}
