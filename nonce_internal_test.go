package sluice

import (
	"encoding/json"
	"testing"
	"time"
)

func TestWithNonce(t *testing.T) {
	now := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ct, body string
		safe     bool
		added    bool
	}{
		{"application/json", `{"content":"a"}`, true, true},
		{"", ` {"content":"a"} `, true, true},
		{"application/json; charset=utf-8", `{}`, true, true},
		{"application/json", `{"content":"a","nonce":"x"}`, false, false},
		{"application/json", `{"content":"a","nonce":"x","enforce_nonce":true}`, true, false},
		{"application/json", `{"nonce":1,"enforce_nonce":false}`, false, false},
		{"multipart/form-data; boundary=x", `--x--`, false, false},
		{"text/plain", `{"content":"a"}`, false, false},
		{"application/json", `[1,2]`, false, false},
		{"application/json", `{"content":`, false, false},
	} {
		out, safe := withNonce(c.ct, []byte(c.body), now)
		if safe != c.safe {
			t.Errorf("%q %q: safe %v, want %v", c.ct, c.body, safe, c.safe)
		}
		if !c.added {
			if string(out) != c.body {
				t.Errorf("%q: body changed to %q", c.body, out)
			}
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("%q -> %q: %v", c.body, out, err)
		}
		n, _ := m["nonce"].(string)
		if len(n) == 0 || len(n) > 25 || m["enforce_nonce"] != true {
			t.Errorf("%q -> %q: no valid nonce", c.body, out)
		}
	}
	a, _ := withNonce("", []byte(`{}`), now)
	b, _ := withNonce("", []byte(`{}`), now)
	if string(a) == string(b) {
		t.Error("two nonces at the same instant are equal")
	}
}
