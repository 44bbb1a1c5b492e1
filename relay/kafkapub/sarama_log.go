package kafkapub

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/IBM/sarama"
)

// SaramaLogger adapts l to Sarama's logger, for programs to install once:
//
//	sarama.Logger = kafkapub.SaramaLogger(logger)
//
// Sarama logs through one package-level logger, discarded by default, so
// its reasons for failing (a refused TLS handshake, a SASL rejection, a
// broker that cannot be reached) are lost unless a program sets it.
// Sarama's lines carry no level: lines that report a failure are logged at
// Warn, the rest (metadata refreshes, connections opened, producer ids
// obtained) at Debug.
func SaramaLogger(l *slog.Logger) sarama.StdLogger {
	return saramaLogger{l: l.With("component", "sarama")}
}

type saramaLogger struct{ l *slog.Logger }

var _ sarama.StdLogger = saramaLogger{}

func (s saramaLogger) Print(v ...any) { s.log(fmt.Sprint(v...)) }
func (s saramaLogger) Printf(format string, v ...any) {
	s.log(fmt.Sprintf(format, v...))
}
func (s saramaLogger) Println(v ...any) { s.log(fmt.Sprintln(v...)) }

// failureWords mark the Sarama lines that report something going wrong.
var failureWords = []string{"error", "fail", "unable", "refused", "denied", "invalid", "timeout", "timed out", "x509", "tls:", "abandon"}

// successWords mark lines that report success even though they contain a
// failure word: the idempotent producer's start logs "successful init
// producer id" with the response's error code, "Not an error".
var successWords = []string{"successful", "not an error"}

func (s saramaLogger) log(msg string) {
	msg = strings.TrimSpace(msg)
	s.l.Log(context.Background(), saramaLevel(msg), msg)
}

// saramaLevel is the level of a Sarama line.
func saramaLevel(msg string) slog.Level {
	lower := strings.ToLower(msg)
	for _, w := range successWords {
		if strings.Contains(lower, w) {
			return slog.LevelDebug
		}
	}
	for _, w := range failureWords {
		if strings.Contains(lower, w) {
			return slog.LevelWarn
		}
	}
	return slog.LevelDebug
}
