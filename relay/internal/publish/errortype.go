package publish

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
)

// errorType is a bounded description of a publish failure for the
// error.type attribute: the Kafka error code, a timeout, or the Go type of
// the innermost error.
func errorType(err error) string {
	if code, ok := kafkaErrorCode(err); ok {
		return "kafka_error_" + strconv.FormatInt(code, 10)
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return fmt.Sprintf("%T", err)
		}
		err = next
	}
}

// kafkaErrorCode finds a Sarama broker error (sarama.KError, an int16 code)
// in err's tree. It matches the type by package path and name, as
// messagingSystem does, so the relay does not compile Sarama into programs
// that publish elsewhere.
func kafkaErrorCode(err error) (int64, bool) {
	if err == nil {
		return 0, false
	}
	v := reflect.ValueOf(err)
	if t := v.Type(); t.Name() == "KError" && t.PkgPath() == "github.com/IBM/sarama" && v.CanInt() {
		return v.Int(), true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return kafkaErrorCode(u.Unwrap())
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if code, ok := kafkaErrorCode(e); ok {
				return code, true
			}
		}
	}
	return 0, false
}
