package testkit

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a running command, server or logger
// writes while the test reads it: Write and String may be called from any
// goroutine.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
