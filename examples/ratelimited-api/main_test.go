package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
	"go.uber.org/goleak"
)

// mainEnv makes the test binary run main itself (TestSignal).
const mainEnv = "RATELIMITED_API_RUN_MAIN"

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) != "" {
		os.Args = append([]string{"ratelimited-api"}, strings.Fields(os.Getenv(mainEnv))...)
		main()
		os.Exit(0)
	}
	redis.SetLogger(quietLogger{})
	goleak.VerifyTestMain(m)
}

// clock is a fake clock the test moves.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// server is run serving in the background: its base URL, and a stop that
// cancels it and returns its error and output.
type server struct {
	url  string
	stop func() (error, string)
}

func start(t *testing.T, args []string, now func() time.Time) server {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, args, pw, io.Discard, now)
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		cancel()
		t.Fatalf("no address printed: %v", <-done)
	}
	first := sc.Text()
	url, _, ok := strings.Cut(strings.TrimPrefix(first, "listening on "), " ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		cancel()
		t.Fatalf("first line %q", first)
	}
	var rest strings.Builder
	read := make(chan struct{})
	go func() {
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
		close(read)
	}()
	stop := sync.OnceValues(func() (error, string) {
		cancel()
		err := <-done
		<-read
		return err, rest.String()
	})
	s := server{url: url, stop: stop}
	t.Cleanup(func() { s.stop() })
	return s
}

func get(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, string(body)
}

func TestServeInMemory(t *testing.T) {
	c := &clock{now: time.Date(2026, 11, 2, 12, 0, 0, 0, time.UTC)}
	s := start(t, []string{"-listen", "127.0.0.1:0"}, c.Now)
	defer http.DefaultClient.CloseIdleConnections()

	// A client's first 10 requests go through, Remaining counting down and
	// Clear growing by a drip (100 ms) each.
	for i := range 10 {
		resp, body := get(t, s.url+"/")
		want := map[string]string{
			"X-Ratelimit-Remaining": string(rune('0' + 9 - i)),
			"X-Ratelimit-Clear":     [...]string{"0.100", "0.200", "0.300", "0.400", "0.500", "0.600", "0.700", "0.800", "0.900", "1.000"}[i],
			"Ratelimit-Policy":      `"api";q=10;w=1`,
			"Ratelimit":             `"api";r=` + string(rune('0'+9-i)) + `;t=1`,
			"X-Ratelimit-Reset":     "",
			"Retry-After":           "",
		}
		if resp.StatusCode != 200 || !strings.Contains(body, `"message":"hello, 127.0.0.1"`) {
			t.Fatalf("request %d: %d %q", i+1, resp.StatusCode, body)
		}
		checkHeaders(t, resp.Header, want)
	}
	// The 11th: 429, wait one drip.
	resp, body := get(t, s.url+"/")
	if resp.StatusCode != 429 || resp.Header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("11th: %d %v", resp.StatusCode, resp.Header)
	}
	checkHeaders(t, resp.Header, map[string]string{
		"X-Ratelimit-Remaining": "0", "X-Ratelimit-Clear": "1.000", "X-Ratelimit-Reset": "0.100", "Retry-After": "1",
		"Ratelimit": `"api";r=0;t=1`,
	})
	var problem struct {
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &problem); err != nil || problem.Status != 429 || len(problem.Violated) != 1 || problem.Violated[0] != "api" {
		t.Fatalf("problem %q: %v", body, err)
	}
	// 40 ms later: 60 ms to go.
	c.Add(40 * time.Millisecond)
	resp, _ = get(t, s.url+"/")
	checkHeaders(t, resp.Header, map[string]string{"X-Ratelimit-Reset": "0.060", "X-Ratelimit-Clear": "0.960", "Retry-After": "1"})
	// At the drip, one more goes through.
	c.Add(60 * time.Millisecond)
	if resp, _ := get(t, s.url+"/"); resp.StatusCode != 200 || resp.Header.Get("X-Ratelimit-Remaining") != "0" {
		t.Fatalf("after a drip: %d %v", resp.StatusCode, resp.Header)
	}
	// /metrics is not limited and counts the decisions.
	resp, body = get(t, s.url+"/metrics")
	if resp.StatusCode != 200 || strings.TrimSpace(body) != `{"admitted":11,"blocked":2,"store_errors":0,"store_unavailable":0}` {
		t.Fatalf("metrics: %d %s", resp.StatusCode, body)
	}
	if resp, _ := get(t, s.url+"/other"); resp.StatusCode != 404 {
		t.Fatalf("/other: %d", resp.StatusCode)
	}
	http.DefaultClient.CloseIdleConnections()
	if err, out := s.stop(); err != nil || out != "shut down\n" {
		t.Fatalf("stop: %v %q", err, out)
	}
}

func checkHeaders(t *testing.T, h http.Header, want map[string]string) {
	t.Helper()
	for k, v := range want {
		got := h.Values(k)
		if v == "" && len(got) != 0 || v != "" && (len(got) != 1 || got[0] != v) {
			t.Fatalf("%s: %q, want %q (all: %v)", k, got, v, h)
		}
	}
}

func TestServeOnRedis(t *testing.T) {
	// On Redis the clock is Redis's own: the test cannot stop it, so it
	// checks what holds whatever the timing. A fresh bucket's first
	// answer is exact; then requests go until the first 429, which must
	// come (requests take far less than the 100 ms a drip frees).
	rs := redistest.Start(t)
	s := start(t, []string{"-listen", "127.0.0.1:0", "-redis", rs.URL, "-draft=false"}, nil)
	defer http.DefaultClient.CloseIdleConnections()
	resp, _ := get(t, s.url+"/")
	checkHeaders(t, resp.Header, map[string]string{"X-Ratelimit-Remaining": "9", "X-Ratelimit-Clear": "0.100", "Ratelimit": "", "Retry-After": ""})
	for i := 0; ; i++ {
		if i == 1000 {
			t.Fatal("no 429 after 1,000 requests")
		}
		resp, _ := get(t, s.url+"/")
		if resp.StatusCode == 200 {
			continue
		}
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || resp.Header.Get("X-Ratelimit-Remaining") != "0" {
			t.Fatalf("%d %v", resp.StatusCode, resp.Header)
		}
		reset, err := time.ParseDuration(resp.Header.Get("X-Ratelimit-Reset") + "s")
		if err != nil || reset <= 0 || reset > 100*time.Millisecond {
			t.Fatalf("X-RateLimit-Reset %q", resp.Header.Get("X-Ratelimit-Reset"))
		}
		break
	}
	// Redis down: 503 with Retry-After (the default -unavailable closed).
	rs.Kill()
	resp, body := get(t, s.url+"/")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "Service Unavailable") {
		t.Fatalf("Redis down: %d %v %s", resp.StatusCode, resp.Header, body)
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-listen"},
		{"-nope"},
		{"extra"},
		{"-trusted", "10.0.0.0/33"},
		{"-redis", "http://not-redis"},
		{"-unavailable", "maybe"},
		{"-listen", "256.0.0.1:0"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard, nil); err == nil {
			t.Errorf("%q: no error", args)
		}
	}
	if err := run(context.Background(), []string{"-h"}, io.Discard, io.Discard, nil); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestSignal runs main in a process of its own (this test binary,
// re-executed) and stops it with SIGTERM, then SIGINT: it shuts down
// cleanly and exits 0.
func TestSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), mainEnv+"=-listen 127.0.0.1:0 -trusted 10.0.0.0/8,fd00::/8")
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		if !sc.Scan() {
			cmd.Wait()
			t.Fatal("no address printed")
		}
		url, _, _ := strings.Cut(strings.TrimPrefix(sc.Text(), "listening on "), " ")
		if resp, _ := get(t, url+"/"); resp.StatusCode != 200 {
			t.Fatalf("GET /: %d", resp.StatusCode)
		}
		http.DefaultClient.CloseIdleConnections()
		cmd.Process.Signal(sig)
		var rest strings.Builder
		for sc.Scan() {
			rest.WriteString(sc.Text() + "\n")
		}
		if err := cmd.Wait(); err != nil || rest.String() != "shut down\n" {
			t.Fatalf("%v: exit %v, output %q", sig, err, rest.String())
		}
	}
}
