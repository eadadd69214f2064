package main

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/sluicehq/sluice/bench/internal/harness"
)

// report is everything measured, rendered by markdown.
type report struct {
	p        params
	tp       *throughputResult
	mem      []memResult
	memWhere string
	uploads  []upResult
	upNotes  []string
	took     time.Duration
}

func (r report) markdown() string {
	var b strings.Builder
	p := r.p
	cmd := "cd bench && go run ./cmd/proxybench"
	if len(os.Args) > 1 {
		cmd += " " + strings.Join(os.Args[1:], " ")
	}
	b.WriteString("## proxybench\n\n")
	fmt.Fprintf(&b, "`%s`, %s, in %.0f s.\n\n", cmd, time.Now().UTC().Format("2006-01-02 15:04 UTC"), r.took.Seconds())
	fmt.Fprintf(&b, "- Machine: %s, %d CPUs (GOMAXPROCS %d), %s/%s, %s\n", harness.CPUModel(), runtime.NumCPU(), gomaxprocs(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	fmt.Fprintf(&b, "- Sluice: %s\n", harness.Revision())
	if r.tp != nil {
		fmt.Fprintf(&b, "- Throughput: N=%d requests per round and mode, C=%d callers, %d rounds, %d channels and guilds, limits %d per second (buckets and global, simulator and limiters), upstream latency %v\n",
			p.n, p.c, p.rounds, p.channels, p.limit, p.latency)
	}
	if r.mem != nil {
		fmt.Fprintf(&b, "- Memory: K=%s, Connections=%s (values after the first at the smallest K), settle %v\n", joinInts(p.ks), joinInts(p.conns), p.settle)
	}
	if r.uploads != nil {
		fmt.Fprintf(&b, "- Uploads: scenarios %s; %d large uploads of %d bytes (accepted: of %d bytes); %d stalled uploads sending %d bytes; configurations: default Config, MaxBuffered %d MiB (0: not measured); clients wait at most %v\n",
			p.scenarios, p.uploads, p.uploadBytes, p.acceptedBytes, p.stalled, p.stallSent, p.smallBuffered, p.upWait)
	}
	if r.tp != nil {
		r.writeThroughput(&b)
	}
	if r.mem != nil {
		r.writeMemory(&b)
	}
	if r.uploads != nil {
		r.writeUploads(&b)
	}
	return b.String()
}

// spread is "median (min–max)" of xs, formatted by f.
func spread[T any](xs []T, less func(a, b T) int, f func(T) string) string {
	s := slices.Clone(xs)
	slices.SortFunc(s, less)
	if len(s) == 0 {
		return "–"
	}
	med := s[(len(s)-1)/2]
	if len(s) == 1 {
		return f(med)
	}
	return fmt.Sprintf("%s (%s – %s)", f(med), f(s[0]), f(s[len(s)-1]))
}

func fmtD(d time.Duration) string { return rnd(d).String() }

func fmtSignedD(d time.Duration) string {
	if d >= 0 {
		return "+" + rnd(d).String()
	}
	return "−" + rnd(-d).String()
}

func (r report) writeThroughput(b *strings.Builder) {
	tp := r.tp
	fmt.Fprintf(b, "\n### Throughput and latency (%.0f s)\n\n", tp.took.Seconds())
	b.WriteString("Each mode sends the same N GETs from C callers, one request at a time each; latency is from before the call until the whole body is read. **direct**: `Limiter.Do` on a `sluice.Limiter`. **proxy**: `http.Client` (HTTP/1.1, keep-alive) to a loopback `net/http` server serving `proxy.Proxy`, whose limiter for the token is made from the same options. Both reach one in-process simulator (TLS, HTTP/2). CPU/req is the whole process's CPU time (simulator and callers included) over the round, per request. Median over the rounds, with the range.\n\n")
	b.WriteString("| mode | req/s | p50 | p90 | p99 | CPU/req | failed |\n|---|---:|---:|---:|---:|---:|---:|\n")
	by := map[string][]sample{}
	for _, s := range tp.samples {
		by[s.mode] = append(by[s.mode], s)
	}
	for _, mode := range []string{"direct", "proxy"} {
		ss := by[mode]
		rps, p50, p90, p99, cpu := make([]float64, len(ss)), make([]time.Duration, len(ss)), make([]time.Duration, len(ss)), make([]time.Duration, len(ss)), make([]time.Duration, len(ss))
		bad := 0
		for i, s := range ss {
			rps[i], p50[i], p90[i], p99[i], cpu[i] = s.rps(), s.pct(.5), s.pct(.9), s.pct(.99), s.cpuPerReq()
			bad += s.bad
		}
		f0 := func(x float64) string { return fmt.Sprintf("%.0f", x) }
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %d |\n", mode, spread(rps, cmp.Compare[float64], f0), spread(p50, cmp.Compare[time.Duration], fmtD),
			spread(p90, cmp.Compare[time.Duration], fmtD), spread(p99, cmp.Compare[time.Duration], fmtD), spread(cpu, cmp.Compare[time.Duration], fmtD), bad)
	}
	// Differences within a round: the two runs of one round are adjacent
	// in time, so machine noise cancels better than between medians.
	var d50, d90, d99, dcpu []time.Duration
	var ratio []float64
	for round := 1; round <= r.p.rounds; round++ {
		var d, px *sample
		for i := range tp.samples {
			s := &tp.samples[i]
			if s.round == round && s.mode == "direct" {
				d = s
			} else if s.round == round && s.mode == "proxy" {
				px = s
			}
		}
		if d == nil || px == nil {
			continue
		}
		d50 = append(d50, px.pct(.5)-d.pct(.5))
		d90 = append(d90, px.pct(.9)-d.pct(.9))
		d99 = append(d99, px.pct(.99)-d.pct(.99))
		dcpu = append(dcpu, px.cpuPerReq()-d.cpuPerReq())
		ratio = append(ratio, px.rps()/d.rps())
	}
	b.WriteString("\nProxy minus direct, within each round (median, range):\n\n")
	b.WriteString("| | proxy − direct |\n|---|---:|\n")
	fmt.Fprintf(b, "| added latency p50 | %s |\n", spread(d50, cmp.Compare[time.Duration], fmtSignedD))
	fmt.Fprintf(b, "| added latency p90 | %s |\n", spread(d90, cmp.Compare[time.Duration], fmtSignedD))
	fmt.Fprintf(b, "| added latency p99 | %s |\n", spread(d99, cmp.Compare[time.Duration], fmtSignedD))
	fmt.Fprintf(b, "| added CPU per request | %s |\n", spread(dcpu, cmp.Compare[time.Duration], fmtSignedD))
	fmt.Fprintf(b, "| throughput proxy / direct | %s |\n", spread(ratio, cmp.Compare[float64], func(x float64) string { return fmt.Sprintf("%.2f", x) }))
	b.WriteString("\nEvery round (the order alternates):\n\n")
	b.WriteString("| round | mode | req/s | p50 | p90 | p99 | CPU/req | failed |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range tp.samples {
		fmt.Fprintf(b, "| %d | %s | %.0f | %s | %s | %s | %s | %d |\n", s.round, s.mode, s.rps(), fmtD(s.pct(.5)), fmtD(s.pct(.9)), fmtD(s.pct(.99)), fmtD(s.cpuPerReq()), s.bad)
	}
	st := tp.stats
	fmt.Fprintf(b, "\nSimulator: %d requests answered (warm-up included), by status %v, 429s %d.\n", st.Requests, st.ByStatus, total429(st))
}

func (r report) writeMemory(b *strings.Builder) {
	b.WriteString("\n### Memory per idle token\n\n")
	fmt.Fprintf(b, "Each configuration runs in a fresh process: a proxy (`MaxTokens` K+16, default limiter options but `Connections`) gets one `GET /channels/{id}` from each of K distinct tokens through `ServeHTTP` (no front server, %d senders); the simulator runs in %s. Deltas from before the requests, after `runtime.GC()` ×3, divided by K: right after the last answer (**answered**) and %v later (**idle**: bucket windows over, the limiters' idle workers gone after their 30 s). Heap in use is `MemStats.HeapInuse`, live heap `HeapAlloc`, stacks `StackInuse`.\n\n", r.p.c, r.memWhere, r.p.settle)
	b.WriteString("| K | Connections | heap in use / token, answered | heap in use / token, idle | live heap / token, idle | stacks / token, idle | goroutines / token, answered | goroutines / token, idle |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	kb := func(x float64) string { return fmt.Sprintf("%.1f KB", x/1024) }
	for _, m := range r.mem {
		k := m.Job.K
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %.2f | %.2f |\n", k, connsName(m.Job.Conns),
			kb(perToken(m.Answered.HeapInuse, m.Before.HeapInuse, k)), kb(perToken(m.Settled.HeapInuse, m.Before.HeapInuse, k)),
			kb(perToken(m.Settled.HeapAlloc, m.Before.HeapAlloc, k)), kb(perToken(m.Settled.StackInuse, m.Before.StackInuse, k)),
			float64(m.Answered.Goroutines-m.Before.Goroutines)/float64(k), float64(m.Settled.Goroutines-m.Before.Goroutines)/float64(k))
	}
	b.WriteString("\nGoroutines per idle token, by the function that started them:\n\n")
	for _, m := range r.mem {
		fmt.Fprintf(b, "- K=%d, Connections=%s: %s\n", m.Job.K, connsName(m.Job.Conns), strings.Join(m.creatorDeltas(m.Settled), ", "))
	}
	if r.p.memprofile != "" {
		fmt.Fprintf(b, "\nHeap profiles of the idle tokens: `go tool pprof -sample_index=inuse_space -top %s-k<K>-conns<C>.pprof`.\n", r.p.memprofile)
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}
