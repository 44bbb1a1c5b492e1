package hostname

import "testing"

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"localhost": true, "LOCALHOST.": true, "app.localhost": true, "localhost:8080": true,
		"127.0.0.1": true, "127.8.9.10": true, "::1": true, "[::1]:8080": true,
		"": false, "0.0.0.0": false, "::": false, "10.0.0.1": false, "example.com": false,
		"localhost.example.com": false, "notlocalhost": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", host, got, want)
		}
	}
}

func TestNormal(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]string{
		"Admin.Example.com.": "admin.example.com", "[::1]:8080": "::1", "[::1]": "::1",
		"localhost:80": "localhost", "x": "x",
	} {
		if got := Normal(host); got != want {
			t.Errorf("Normal(%q) = %q, want %q", host, got, want)
		}
	}
}
