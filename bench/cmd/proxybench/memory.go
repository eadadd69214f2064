package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
	"github.com/sluicehq/sluice/sluicetest"
)

// measureEnv carries a memJob to a child process (this binary again) that
// measures one configuration: each runs in a fresh process, so that no
// earlier configuration's memory, still being freed, falls into its
// baseline.
const measureEnv = "PROXYBENCH_MEASURE"

// memJob is one configuration of the idle-token measurement.
type memJob struct {
	APIBase string        `json:"api_base"` // "" : start a simulator in the measuring process
	CertPEM string        `json:"cert_pem"`
	K       int           `json:"k"`
	Conns   int           `json:"conns"`
	Workers int           `json:"workers"`
	Settle  time.Duration `json:"settle"`
	Profile string        `json:"profile"`
}

// memPoint is the process's memory at one moment, after runtime.GC.
type memPoint struct {
	HeapInuse  uint64         `json:"heap_inuse"`
	HeapAlloc  uint64         `json:"heap_alloc"`
	StackInuse uint64         `json:"stack_inuse"`
	Goroutines int            `json:"goroutines"`
	Creators   map[string]int `json:"creators"` // goroutines by the function that started them
}

func snapshot() memPoint {
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memPoint{HeapInuse: ms.HeapInuse, HeapAlloc: ms.HeapAlloc, StackInuse: ms.StackInuse,
		Goroutines: runtime.NumGoroutine(), Creators: goroutineCreators()}
}

// goroutineCreators counts the live goroutines by the function named on
// their "created by" line.
func goroutineCreators() map[string]int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]int{}
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		name := "(main or runtime)"
		if _, after, ok := bytes.Cut(g, []byte("\ncreated by ")); ok {
			line, _, _ := bytes.Cut(after, []byte("\n"))
			fn, _, _ := bytes.Cut(line, []byte(" in goroutine "))
			name = string(fn)
		}
		out[name]++
	}
	return out
}

// memResult is what one configuration measured.
type memResult struct {
	Job      memJob        `json:"job"`
	Before   memPoint      `json:"before"`
	Answered memPoint      `json:"answered"` // right after the K answers
	Settled  memPoint      `json:"settled"`  // after Settle: bucket windows over, tokens idle
	Took     time.Duration `json:"took"`
}

func perToken(after, before uint64, k int) float64 {
	return (float64(after) - float64(before)) / float64(k)
}

// creatorDeltas lists the goroutine creators whose count changed, most
// first, per token.
func (m memResult) creatorDeltas(p memPoint) []string {
	type kv struct {
		name string
		n    int
	}
	var ds []kv
	for name, n := range p.Creators {
		if d := n - m.Before.Creators[name]; d != 0 {
			ds = append(ds, kv{name, d})
		}
	}
	slices.SortFunc(ds, func(a, b kv) int { return b.n - a.n })
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("`%s` %+.2f", d.name, float64(d.n)/float64(m.Job.K))
	}
	return out
}

// measureChild is the measuring process's side: it runs the job in its
// environment and prints the memResult as JSON.
func measureChild() {
	var job memJob
	if err := json.Unmarshal([]byte(os.Getenv(measureEnv)), &job); err != nil {
		fail(fmt.Errorf("measure: %w", err))
	}
	var up *upstream
	var err error
	if job.APIBase == "" {
		up, err = inProcess(sluicetest.Options{})
	} else {
		up, err = remote(job.APIBase, job.CertPEM)
	}
	if err != nil {
		fail(fmt.Errorf("measure: %w", err))
	}
	defer up.close()
	if job.Profile != "" {
		runtime.MemProfileRate = 4096
	}
	res, err := measureMemory(up, job)
	if err != nil {
		fail(fmt.Errorf("measure K=%d, Connections=%d: %w", job.K, job.Conns, err))
	}
	b, _ := json.Marshal(res)
	os.Stdout.Write(append(b, '\n'))
}

// measureMemory starts a proxy in front of up, sends one request with
// each of K distinct tokens and measures what stays once every one is
// answered.
func measureMemory(up *upstream, job memJob) (memResult, error) {
	began := time.Now()
	res := memResult{Job: job}
	tmpl := sluice.Options{TLSConfig: up.tls, Connections: job.Conns}
	p, err := proxy.New(proxy.Config{Upstream: up.apiBase, Limiter: tmpl, MaxTokens: job.K + 16})
	if err != nil {
		return res, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = p.Close(ctx)
	}()
	// The token-less limiter New makes connects in the background; let it.
	time.Sleep(300 * time.Millisecond)
	res.Before = snapshot()

	var next, failed atomic.Int64
	var firstE atomic.Value
	var wg sync.WaitGroup
	for range min(job.Workers, job.K) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= job.K {
					return
				}
				// ServeHTTP directly: no front server, so no client or
				// server connection of ours is counted.
				req := httptest.NewRequest(http.MethodGet, "/api/v10/channels/"+strconv.Itoa(9000+i), nil)
				req.Header.Set("Authorization", "Bot idle-"+strconv.Itoa(i))
				rec := httptest.NewRecorder()
				p.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					failed.Add(1)
					firstE.CompareAndSwap(nil, fmt.Sprintf("HTTP %d: %s", rec.Code, strings.TrimSpace(rec.Body.String())))
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		return res, fmt.Errorf("%d of %d requests failed, first: %v", n, job.K, firstE.Load())
	}
	res.Answered = snapshot()
	time.Sleep(job.Settle)
	res.Settled = snapshot()
	if job.Profile != "" {
		f, err := os.Create(job.Profile)
		if err != nil {
			return res, err
		}
		err = pprof.Lookup("heap").WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return res, err
		}
	}
	res.Took = time.Since(began)
	return res, nil
}

// measureAllMemory measures every (Connections, K) configuration, one
// after the other, each in a fresh child process with a fresh proxy.
func measureAllMemory(p params) ([]memResult, string, error) {
	var up *upstream
	where := "a child process of its own (this binary, `" + upstreamEnv + "=1`), default Discord-like rules"
	if p.memUpstream == "inprocess" {
		up = &upstream{close: func() {}}
		where = "the measuring process itself (its server side of each connection counts too), default Discord-like rules"
	} else {
		var err error
		if up, err = child(); err != nil {
			return nil, "", err
		}
	}
	defer up.close()
	var out []memResult
	for ci, conns := range p.conns {
		for _, k := range p.ks {
			if ci > 0 && k != slices.Min(p.ks) {
				continue // other Connections values: at the smallest K only
			}
			job := memJob{APIBase: up.apiBase, CertPEM: up.certPEM, K: k, Conns: conns, Workers: p.c, Settle: p.settle}
			if p.memprofile != "" {
				job.Profile = fmt.Sprintf("%s-k%d-conns%d.pprof", p.memprofile, k, conns)
			}
			r, err := runJob(job)
			if err != nil {
				return out, where, fmt.Errorf("K=%d, Connections=%d: %w", k, conns, err)
			}
			fmt.Fprintf(os.Stderr, "memory K=%d Connections=%s: heap in use %+.1f KB/token, goroutines %+.2f/token (idle)\n",
				k, connsName(conns), perToken(r.Settled.HeapInuse, r.Before.HeapInuse, k)/1024,
				float64(r.Settled.Goroutines-r.Before.Goroutines)/float64(k))
			out = append(out, r)
		}
	}
	return out, where, nil
}

// runJob measures one configuration in a child process.
func runJob(job memJob) (memResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return memResult{}, err
	}
	b, _ := json.Marshal(job)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), measureEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	outb, err := cmd.Output()
	if err != nil {
		return memResult{}, fmt.Errorf("measuring process: %w", err)
	}
	var r memResult
	if err := json.Unmarshal(outb, &r); err != nil {
		return memResult{}, fmt.Errorf("measuring process: %w", err)
	}
	return r, nil
}

func connsName(c int) string {
	if c == 0 {
		return "default"
	}
	return strconv.Itoa(c)
}
