// Package consolebrowser drives the web console (package
// outboxadmin/console) in headless Chromium through chromedp, as an
// operator would: against a real database with pending, published and dead
// events, with a relay publishing through Watermill's Go-channel pub/sub.
// It lives in the integration module so the root module does not require
// chromedp. Chromium is Debian's chromium package (/usr/bin/chromium);
// without it the test skips, and fails in CI (CI=true). With
// CONSOLE_SCREENSHOTS=dir it writes the pages it sees to dir as PNGs (the
// screenshots in docs/console come from there).
package consolebrowser
