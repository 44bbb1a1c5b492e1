package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
)

// csrfCookie holds the browser's random CSRF secret; csrfField is the form
// field that carries its signature.
const (
	csrfCookie = "txoutbox_console_csrf"
	csrfField  = "csrf"
)

// csrf is a signed double-submit token: the browser keeps a random secret in
// a cookie, and every form carries the HMAC of that secret under a key
// random to this Console. Another site can make the browser send the cookie
// but can neither read it nor forge its signature, so it cannot build a
// form that passes; a restart changes the key, and old forms are refused.
type csrf struct{ key []byte }

// token returns the form token for r, setting the secret cookie when r has
// none. The cookie's path is where the console is mounted.
func (c csrf) token(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(csrfCookie); err == nil && validSecret(ck.Value) {
		return c.sign(ck.Value)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "" // every POST is then refused, which is safe
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{
		Name: csrfCookie, Value: secret, Path: mountPath(r),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	// The request may be the first; the cookie arrives with the next one.
	r.AddCookie(&http.Cookie{Name: csrfCookie, Value: secret})
	return c.sign(secret)
}

// valid reports whether the POST r carries the signature of its cookie.
func (c csrf) valid(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || !validSecret(ck.Value) {
		return false
	}
	got, err := base64.RawURLEncoding.DecodeString(r.PostFormValue(csrfField))
	if err != nil {
		return false
	}
	want, _ := base64.RawURLEncoding.DecodeString(c.sign(ck.Value))
	return hmac.Equal(got, want)
}

func (c csrf) sign(secret string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(secret))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func validSecret(s string) bool {
	b, err := base64.RawURLEncoding.DecodeString(s)
	return err == nil && len(b) == 32
}

// mountPath is the path the console is mounted at, with a trailing slash:
// the request's original path less the path the console sees (what
// http.StripPrefix removed).
func mountPath(r *http.Request) string {
	orig, _, _ := strings.Cut(r.RequestURI, "?")
	if p, ok := strings.CutSuffix(orig, r.URL.Path); ok {
		return strings.TrimSuffix(p, "/") + "/"
	}
	return "/"
}
