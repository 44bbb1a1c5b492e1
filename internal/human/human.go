// Package human renders figures for people: the CLI's tables and the
// console's pages show them the same way.
package human

import "time"

// Duration renders d rounded to what matters at its size: milliseconds
// below a second, tenths of a second below a minute, seconds above.
func Duration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
