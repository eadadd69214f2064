// Command proxybench measures what package proxy costs over a
// sluice.Limiter used directly: throughput and added latency of the same
// GET workload sent through Limiter.Do and through the proxy (a plain
// HTTP/1.1 client with keep-alive to a loopback net/http server serving
// proxy.Proxy), and the memory and goroutines each idle token's limiter
// keeps; with -only uploads, the memory of a proxy under hostile uploads.
//
// Run it from the bench module:
//
//	cd bench && go run ./cmd/proxybench
//	cd bench && go run ./cmd/proxybench -n 5000 -c 32 -rounds 5 -k 200,1000 -out /tmp/proxybench.md
//
// Throughput: both modes send to one in-process sluicetest simulator
// (TLS, HTTP/2, loopback) whose four GET routes and global limit admit far
// more than the workload sends (-limit, set in the simulator's rules and
// in the limiters' GlobalLimit), with a fixed answer delay (-latency).
// Every distinct path is sent once through each mode first (not measured);
// then -rounds rounds each run both modes, alternating which goes first.
//
// Memory: for each -k K (and for the smallest K with each further -conns
// value, the template's Options.Connections), a fresh proxy gets one
// request from each of K distinct tokens (through ServeHTTP, no front
// server); the heap in use, the goroutine stacks and the goroutines are
// compared, after runtime.GC, with before the requests: right after the
// answers and again after -settle (31 s), when the bucket windows are
// over, the limiters' idle workers have exited (after 30 s) and the tokens
// are idle. Each configuration runs in a fresh child process (this binary
// again), so that nothing of an earlier one is still being freed, and the
// simulator in another (-mem-upstream), so that its side of each
// connection is not counted. -memprofile PREFIX writes a heap profile of
// each configuration once idle.
//
// Uploads (-only uploads, not part of the default run: it takes about four
// minutes and opens thousands of connections): for each scenario, a
// fresh child process serves proxy.Proxy behind a loopback net/http
// server in front of a child simulator, with the default Config and, if
// -small-buffered is not 0, with MaxBuffered that many MiB; this process
// sends hostile uploads to POST /api/v10/channels/{id}/messages over raw
// TCP connections: -uploads concurrent uploads of -upload-bytes each,
// chunked ("chunked") and with Content-Length ("length"), and -stalled
// uploads that send -stall-sent bytes of body and then nothing, with
// Content-Length 1 MiB ("stalled-length") and chunked
// ("stalled-chunked"); -scenarios accepted adds -uploads uploads of
// -accepted-bytes, under MaxBody, which the proxy relays upstream. The
// child samples its RSS, heap in use and goroutines every 10 ms and
// reports the peaks; the clients count the statuses they got and when. It also builds against the proxy before
// the body options (MaxBody, MaxBuffered, BodyTimeout) existed, and
// then measures the default Config only.
//
// It prints a Markdown report (and writes it to -out) with the command, Go
// version and machine; progress goes to stderr.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// params are the flags.
type params struct {
	n, c, rounds, channels, limit int
	latency, settle               time.Duration
	ks, conns                     []int
	only, memUpstream, memprofile string

	// the uploads part
	uploads, stalled, smallBuffered int
	uploadBytes, stallSent          int64
	acceptedBytes                   int64
	upWait                          time.Duration
	scenarios                       string
}

func main() {
	if os.Getenv(upstreamEnv) == "1" {
		serveChild()
		return
	}
	if os.Getenv(measureEnv) != "" {
		measureChild()
		return
	}
	if os.Getenv(uploadsEnv) != "" {
		uploadsChild()
		return
	}
	var p params
	flag.IntVar(&p.n, "n", 5000, "requests per round and mode")
	flag.IntVar(&p.c, "c", 32, "concurrent callers (each sends one request at a time); also the senders of the memory phase")
	flag.IntVar(&p.rounds, "rounds", 5, "rounds; each runs both modes, alternating which goes first")
	flag.IntVar(&p.channels, "channels", 250, "distinct channels (and guilds) the workload spreads over")
	flag.IntVar(&p.limit, "limit", 100000, "bucket and global limit per second, in the simulator and the limiters (a limiter's global window keeps that many 24-byte slots)")
	flag.DurationVar(&p.latency, "latency", time.Millisecond, "the simulator's delay before every answer")
	ks := flag.String("k", "200,1000", "comma-separated token counts of the memory phase")
	conns := flag.String("conns", "0,1", "comma-separated Options.Connections of the limiter template in the memory phase (0: default, 4); the first is measured at every -k, the others at the smallest -k only")
	flag.DurationVar(&p.settle, "settle", 31*time.Second, "wait after the memory phase's answers before measuring idle tokens (over 30 s: a limiter's idle worker goroutines exit after 30 s)")
	flag.StringVar(&p.only, "only", "", `"throughput" or "memory" to run one phase of the default run, "uploads" for the hostile uploads (not in the default run)`)
	flag.StringVar(&p.memUpstream, "mem-upstream", "child", `where the memory phase's simulator runs: "child" (a child process) or "inprocess"`)
	flag.StringVar(&p.memprofile, "memprofile", "", "write heap profiles of the memory phase to PREFIX-k<K>-conns<C>.pprof")
	flag.IntVar(&p.uploads, "uploads", 20, "uploads: concurrent large uploads of the chunked and length scenarios")
	flag.Int64Var(&p.uploadBytes, "upload-bytes", 100_000_000, "uploads: bytes of each large upload")
	flag.Int64Var(&p.acceptedBytes, "accepted-bytes", 8_000_000, "uploads: bytes of each upload of the accepted scenario (under MaxBody, and under the simulator's 8 MiB)")
	flag.IntVar(&p.stalled, "stalled", 5000, "uploads: connections of the stalled scenarios")
	flag.Int64Var(&p.stallSent, "stall-sent", 10_000, "uploads: body bytes a stalled upload sends before it stalls")
	flag.IntVar(&p.smallBuffered, "small-buffered", 75, "uploads: Config.MaxBuffered in MiB of the second configuration (0: the default Config only)")
	flag.DurationVar(&p.upWait, "upload-wait", 90*time.Second, "uploads: how long a client waits for its answer before the scenario ends (the default BodyTimeout is 1 min)")
	flag.StringVar(&p.scenarios, "scenarios", "chunked,length,stalled-length,stalled-chunked", "uploads: comma-separated scenarios to run (also: accepted)")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the throughput phase to FILE")
	out := flag.String("out", "", "also write the Markdown report to FILE")
	flag.Parse()
	var err error
	if p.ks, err = ints(*ks); err == nil {
		p.conns, err = ints(*conns)
	}
	switch {
	case err != nil:
	case p.n < 1 || p.c < 1 || p.rounds < 1 || p.channels < 1 || p.limit < 1 || p.limit > 1_000_000:
		err = fmt.Errorf("-n, -c, -rounds, -channels must be positive and -limit in [1, 1000000]")
	case slices.Min(p.ks) < 1 || slices.Max(p.conns) > 64:
		err = fmt.Errorf("-k values must be positive and -conns values at most 64")
	case p.only != "" && p.only != "throughput" && p.only != "memory" && p.only != "uploads":
		err = fmt.Errorf("-only must be throughput, memory or uploads")
	case p.uploads < 1 || p.stalled < 1 || p.uploadBytes < 1 || p.stallSent < 1 || p.acceptedBytes < 1 || p.smallBuffered < 0 || p.upWait <= 0:
		err = fmt.Errorf("-uploads, -stalled, -upload-bytes, -stall-sent, -accepted-bytes and -upload-wait must be positive, -small-buffered not negative")
	case p.smallBuffered > 0 && p.smallBuffered < 75:
		err = fmt.Errorf("-small-buffered must be at least 75 (MiB): MaxBuffered is at least 3 x the default MaxBody")
	case p.memUpstream != "child" && p.memUpstream != "inprocess":
		err = fmt.Errorf("-mem-upstream must be child or inprocess")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxybench:", err)
		os.Exit(2)
	}

	began := time.Now()
	rep := report{p: p}
	if p.only == "" || p.only == "throughput" {
		if *cpuprofile != "" {
			f, err := os.Create(*cpuprofile)
			if err != nil {
				fail(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				fail(err)
			}
			defer f.Close()
		}
		tr, err := measureThroughput(p)
		if *cpuprofile != "" {
			pprof.StopCPUProfile()
		}
		if err != nil {
			fail(fmt.Errorf("throughput: %w", err))
		}
		rep.tp = &tr
	}
	if p.only == "uploads" {
		ups, notes, err := measureUploads(p)
		if err != nil {
			fail(fmt.Errorf("uploads: %w", err))
		}
		rep.uploads, rep.upNotes = ups, notes
	}
	if p.only == "" || p.only == "memory" {
		mem, where, err := measureAllMemory(p)
		if err != nil {
			fail(fmt.Errorf("memory: %w", err))
		}
		rep.mem, rep.memWhere = mem, where
	}
	rep.took = time.Since(began)
	md := rep.markdown()
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "proxybench: wrote %s\n", *out)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "proxybench:", err)
	os.Exit(1)
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// gomaxprocs is shown in the report beside the CPU count.
func gomaxprocs() int { return runtime.GOMAXPROCS(0) }
