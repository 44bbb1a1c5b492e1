package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// incompleteError is a drain that stopped before its backlog was through,
// at -timeout or on an error: how far it got, which the summary reports as
// the scenario's partial figures.
type incompleteError struct {
	Published, Backlog int64
	Elapsed            time.Duration
	// Err is why it stopped; nil for the timeout.
	Err error
}

func (e *incompleteError) Error() string {
	msg := fmt.Sprintf("%d of %d events published after %s", e.Published, e.Backlog, e.Elapsed.Round(100*time.Millisecond))
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *incompleteError) Unwrap() error { return e.Err }

// eps is the partial drain's rate.
func (e *incompleteError) eps() float64 { return float64(e.Published) / e.Elapsed.Seconds() }

// failure is a scenario that ended in an error. The figures it set in the
// summary before the error (a drain that finished) stay there.
type failure struct {
	Scenario string `json:"scenario"`
	Error    string `json:"error"`
	// The drain that did not finish, when the error says how far it got.
	Published *int64   `json:"published,omitempty"`
	Backlog   *int64   `json:"backlog,omitempty"`
	Seconds   *float64 `json:"seconds,omitempty"`
	EPS       *float64 `json:"eps,omitempty"`
}

func newFailure(scenario string, err error) failure {
	f := failure{Scenario: scenario, Error: err.Error()}
	var inc *incompleteError
	if errors.As(err, &inc) {
		seconds, eps := inc.Elapsed.Seconds(), inc.eps()
		f.Published, f.Backlog, f.Seconds, f.EPS = &inc.Published, &inc.Backlog, &seconds, &eps
	}
	return f
}

// fields are the failure's entries on the summary line, after every other:
// <scenario>_published, _backlog, _seconds and _partial_eps when the
// partial drain is known, and <scenario>_error last, quoted as a Go string
// (logfmt's quoting), the only value on the line that may hold spaces.
func (f failure) fields() []string {
	var out []string
	if f.EPS != nil {
		eps := "-"
		if !math.IsNaN(*f.EPS) && !math.IsInf(*f.EPS, 0) {
			eps = strconv.FormatFloat(math.Round(*f.EPS), 'f', 0, 64)
		}
		out = append(out,
			fmt.Sprintf("%s_published=%d", f.Scenario, *f.Published),
			fmt.Sprintf("%s_backlog=%d", f.Scenario, *f.Backlog),
			fmt.Sprintf("%s_seconds=%.1f", f.Scenario, *f.Seconds),
			fmt.Sprintf("%s_partial_eps=%s", f.Scenario, eps))
	}
	return append(out, fmt.Sprintf("%s_error=%s", f.Scenario, strconv.Quote(f.Error)))
}

// scenario is a step of a run: a name for -skip and -profile, and the
// function that runs it and puts its figures in the summary.
type scenario struct {
	name string
	run  func() error
}

// runScenarios runs each scenario in turn. One that fails is recorded in
// sum (and emitted as a JSON object) and the next still runs, so a slow or
// broken peer costs its own figures only; they stop early only when ctx
// ends (an interrupt). It returns the names of the scenarios that failed.
func runScenarios(ctx context.Context, scenarios []scenario, sum *summary, emit func(any) error) []string {
	var failed []string
	for _, s := range scenarios {
		if err := ctx.Err(); err != nil {
			logf("scenario %s: not run: %v", s.name, err)
			continue
		}
		logf("scenario %s", s.name)
		start := time.Now()
		err := s.run()
		if err == nil {
			logf("scenario %s done in %s", s.name, time.Since(start).Round(100*time.Millisecond))
			continue
		}
		logf("scenario %s failed after %s: %v", s.name, time.Since(start).Round(100*time.Millisecond), err)
		f := newFailure(s.name, err)
		sum.failures = append(sum.failures, f)
		failed = append(failed, s.name)
		if err := emit(f); err != nil {
			logf("scenario %s: %v", s.name, err)
		}
	}
	return failed
}

// failedError is run's error when scenarios failed: the summary is out,
// and the exit status says the run was not whole.
func failedError(failed []string) error {
	return fmt.Errorf("%d scenario(s) failed: %s (their errors are on the summary line)", len(failed), strings.Join(failed, ", "))
}
