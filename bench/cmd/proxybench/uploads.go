package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/proxy"
)

// The uploads part: memory of a proxy under hostile uploads. Each
// (configuration, scenario) runs in a fresh child process (this binary,
// uploadsEnv set to the upJob) that serves a proxy.Proxy behind a loopback
// net/http server in front of the child simulator, samples its own memory
// every 10 ms and reports the peaks; the clients are this process's, raw
// TCP connections, so that neither their memory nor the simulator's is
// counted.

// uploadsEnv carries an upJob to the child that serves the proxy.
const uploadsEnv = "PROXYBENCH_UPLOADS"

// hostileToken is the token of every upload and of the probes: one bot's.
const hostileToken = "Bot bench-hostile"

// upJob is one configuration of the proxy, for its child process.
type upJob struct {
	APIBase     string `json:"api_base"`
	CertPEM     string `json:"cert_pem"`
	MaxBuffered int64  `json:"max_buffered"` // 0: the default Config
}

// uploadConfig is the proxy's Config with MaxBuffered set unless 0 (the
// default Config). The field is set by name so that this program also
// builds against the proxy before 43775cf, which has no MaxBody,
// MaxBuffered or BodyTimeout: there it reports false for any other value
// than 0, and only the default configuration is measured.
func uploadConfig(c proxy.Config, maxBuffered int64) (proxy.Config, bool) {
	if maxBuffered == 0 {
		return c, true
	}
	f := reflect.ValueOf(&c).Elem().FieldByName("MaxBuffered")
	if !f.IsValid() || f.Kind() != reflect.Int64 {
		return c, false
	}
	f.SetInt(maxBuffered)
	return c, true
}

// hasBodyLimits reports whether this proxy has the body options (MaxBody,
// MaxBuffered, BodyTimeout), i.e. is 43775cf or later.
func hasBodyLimits() bool {
	_, ok := reflect.TypeFor[proxy.Config]().FieldByName("MaxBuffered")
	return ok
}

// upPoint is the proxy process's memory at rest, after runtime.GC.
type upPoint struct {
	RSS        uint64 `json:"rss"`
	HeapInuse  uint64 `json:"heap_inuse"`
	Goroutines int    `json:"goroutines"`
}

// upPeaks is what the proxy's process sampled while the clients ran.
type upPeaks struct {
	RSS                  uint64 `json:"rss"`       // the larger of VmHWM (reset at the start) and the sampled VmRSS
	HWM                  uint64 `json:"hwm"`       // VmHWM at the end (0: unknown)
	HWMReset             bool   `json:"hwm_reset"` // clear_refs accepted "5": VmHWM counts from the start only
	SampledRSS           uint64 `json:"sampled_rss"`
	HeapInuse            uint64 `json:"heap_inuse"` // heap objects + unused heap spans (MemStats.HeapInuse)
	Goroutines           int    `json:"goroutines"`
	GoroutinesAtHeapPeak int    `json:"goroutines_at_heap_peak"`
	Samples              int    `json:"samples"`
	ServerErrors         int    `json:"server_errors"` // lines the http.Server logged
	FirstServerError     string `json:"first_server_error"`
}

// upHello is the child's first line: it serves and samples.
type upHello struct {
	Addr     string  `json:"addr"`
	Baseline upPoint `json:"baseline"`
	NoFile   uint64  `json:"nofile"` // RLIMIT_NOFILE after raising it
	Error    string  `json:"error"`
}

// uploadsChild serves a proxy for one configuration: it prints an upHello
// once it listens and samples, then, when a line (or EOF) comes on stdin,
// the upPeaks, and exits.
func uploadsChild() {
	var job upJob
	say := func(v any) {
		b, _ := json.Marshal(v)
		os.Stdout.Write(append(b, '\n'))
	}
	if err := json.Unmarshal([]byte(os.Getenv(uploadsEnv)), &job); err != nil {
		say(upHello{Error: err.Error()})
		os.Exit(1)
	}
	nofile, err := raiseNoFile()
	if err != nil {
		fmt.Fprintln(os.Stderr, "proxybench uploads: raising RLIMIT_NOFILE:", err)
	}
	up, err := remote(job.APIBase, job.CertPEM)
	if err != nil {
		say(upHello{Error: err.Error()})
		os.Exit(1)
	}
	cfg, ok := uploadConfig(proxy.Config{Upstream: up.apiBase, Limiter: sluice.Options{TLSConfig: up.tls}}, job.MaxBuffered)
	if !ok {
		say(upHello{Error: "this proxy has no Config.MaxBuffered"})
		os.Exit(1)
	}
	p, err := proxy.New(cfg)
	if err != nil {
		say(upHello{Error: err.Error()})
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		say(upHello{Error: err.Error()})
		os.Exit(1)
	}
	errs := &lineCounter{}
	// As cmd/sluice serves the proxy (HTTP/1.1 here).
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, ErrorLog: log.New(errs, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	// The token-less limiter New makes connects in the background; let it.
	time.Sleep(300 * time.Millisecond)
	for range 3 {
		runtime.GC()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := upPoint{RSS: vmRSS(), HeapInuse: ms.HeapInuse, Goroutines: runtime.NumGoroutine()}
	reset := resetHWM()
	s := startSampler(10 * time.Millisecond)
	say(upHello{Addr: ln.Addr().String(), Baseline: base, NoFile: nofile})
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	peaks := s.stop()
	peaks.HWMReset = reset
	peaks.HWM = vmHWM()
	peaks.RSS = max(peaks.SampledRSS, peaks.HWM)
	if !reset {
		// VmHWM counts from the process's start: only the samples are
		// this scenario's.
		peaks.RSS = peaks.SampledRSS
	}
	peaks.ServerErrors, peaks.FirstServerError = errs.get()
	say(peaks)
	os.Exit(0) // no Close: stalled uploads of the old proxy would hold it
}

// lineCounter counts the lines the http.Server logs and keeps the first.
type lineCounter struct {
	mu    sync.Mutex
	n     int
	first string
}

func (l *lineCounter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		l.first = strings.TrimSpace(string(b))
	}
	l.n++
	return len(b), nil
}

func (l *lineCounter) get() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.first
}

// sampler reads the process's RSS, heap in use and goroutines every tick
// and keeps the peaks.
type sampler struct {
	done  chan struct{}
	out   chan upPeaks
	every time.Duration
}

func startSampler(every time.Duration) *sampler {
	s := &sampler{done: make(chan struct{}), out: make(chan upPeaks, 1), every: every}
	go s.run()
	return s
}

func (s *sampler) run() {
	ms := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/sched/goroutines:goroutines"},
	}
	var pk upPeaks
	sample := func() {
		metrics.Read(ms)
		var heap uint64
		for _, m := range ms[:2] {
			if m.Value.Kind() == metrics.KindUint64 {
				heap += m.Value.Uint64()
			}
		}
		g := 0
		if ms[2].Value.Kind() == metrics.KindUint64 {
			g = int(ms[2].Value.Uint64())
		} else {
			g = runtime.NumGoroutine()
		}
		if heap > pk.HeapInuse {
			pk.HeapInuse, pk.GoroutinesAtHeapPeak = heap, g
		}
		pk.Goroutines = max(pk.Goroutines, g)
		pk.SampledRSS = max(pk.SampledRSS, vmRSS())
		pk.Samples++
	}
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		sample()
		select {
		case <-s.done:
			sample()
			s.out <- pk
			return
		case <-t.C:
		}
	}
}

func (s *sampler) stop() upPeaks {
	close(s.done)
	return <-s.out
}

// upScenario is one kind of hostile upload.
type upScenario struct {
	Key      string `json:"key"`
	Clients  int    `json:"clients"`
	Chunked  bool   `json:"chunked"`  // Transfer-Encoding: chunked, no Content-Length
	Announce int64  `json:"announce"` // the Content-Length sent (not chunked)
	Send     int64  `json:"send"`     // body bytes sent; fewer than Announce (or any, chunked, Stall): then it stalls
	Stall    bool   `json:"stall"`    // after Send bytes, send nothing more (chunked: no last chunk)
	Accepted bool   `json:"accepted"` // under MaxBody: the proxy relays it upstream
}

func (s upScenario) describe() string {
	switch {
	case s.Accepted:
		return fmt.Sprintf("%s concurrent uploads of %s bytes each with Content-Length, under the default MaxBody: relayed upstream", commas(int64(s.Clients)), commas(s.Send))
	case !s.Stall && s.Chunked:
		return fmt.Sprintf("%s concurrent uploads of %s bytes each, chunked (no Content-Length), sent as fast as loopback allows", commas(int64(s.Clients)), commas(s.Send))
	case !s.Stall:
		return fmt.Sprintf("%s concurrent uploads of %s bytes each with Content-Length", commas(int64(s.Clients)), commas(s.Send))
	case s.Chunked:
		return fmt.Sprintf("%s stalled uploads, chunked: headers and %s bytes of body (one chunk), then nothing", commas(int64(s.Clients)), commas(s.Send))
	default:
		return fmt.Sprintf("%s stalled uploads: headers with Content-Length %s and %s bytes of body, then nothing", commas(int64(s.Clients)), commas(s.Announce), commas(s.Send))
	}
}

// upScenarios are the scenarios named in keys, in that order.
func upScenarios(p params) ([]upScenario, error) {
	all := map[string]upScenario{
		"chunked":         {Key: "chunked", Clients: p.uploads, Chunked: true, Send: p.uploadBytes},
		"length":          {Key: "length", Clients: p.uploads, Announce: p.uploadBytes, Send: p.uploadBytes},
		"stalled-length":  {Key: "stalled-length", Clients: p.stalled, Announce: 1 << 20, Send: p.stallSent, Stall: true},
		"stalled-chunked": {Key: "stalled-chunked", Clients: p.stalled, Chunked: true, Send: p.stallSent, Stall: true},
		"accepted":        {Key: "accepted", Clients: p.uploads, Announce: p.acceptedBytes, Send: p.acceptedBytes, Accepted: true},
	}
	var out []upScenario
	for _, k := range strings.Split(p.scenarios, ",") {
		s, ok := all[strings.TrimSpace(k)]
		if !ok {
			return nil, fmt.Errorf("-scenarios: unknown %q (chunked, length, stalled-length, stalled-chunked, accepted)", k)
		}
		out = append(out, s)
	}
	return out, nil
}

// clientEnd is what one client got.
type clientEnd struct {
	status int           // 0: no answer
	reason string        // X-Sluice-Proxy of the proxy's own answer
	empty  bool          // the answer's body was empty
	at     time.Duration // from the scenario's start to the answer's status line
	err    error         // why there was no answer
	dialed bool
}

// probe is one ordinary request sent while the stalled uploads wait.
type probe struct {
	What   string        `json:"what"`
	Status int           `json:"status"` // 0: no answer
	Reason string        `json:"reason"` // X-Sluice-Proxy of a refusal
	Took   time.Duration `json:"took"`
	Err    string        `json:"err"`
}

// upResult is one (configuration, scenario).
type upResult struct {
	Config     string         `json:"config"`
	Scenario   upScenario     `json:"scenario"`
	Baseline   upPoint        `json:"baseline"`
	Peaks      upPeaks        `json:"peaks"`
	NoFile     uint64         `json:"nofile"`
	Statuses   map[string]int `json:"statuses"`    // by clientEnd.answer
	NoAnswer   int            `json:"no_answer"`   // no status line by the wait's end (or the connection failed)
	DialErrors int            `json:"dial_errors"` // counted in NoAnswer too
	FirstError string         `json:"first_error"`
	Median     time.Duration  `json:"median"` // of the answered clients' times
	Last       time.Duration  `json:"last"`   // the last answer's time (all answered or not)
	AllBy      time.Duration  `json:"all_by"` // 0 unless every client was answered: the last answer's time
	Probes     []probe        `json:"probes"`
	Took       time.Duration  `json:"took"`
	Wait       time.Duration  `json:"wait"`
}

// upChild is a running child process serving a proxy.
type upChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	hello upHello
}

func startUpChild(job upJob) (*upChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(job)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), uploadsEnv+"="+string(b))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &upChild{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	line, err := c.out.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &c.hello)
	}
	if err == nil && c.hello.Error != "" {
		err = errors.New(c.hello.Error)
	}
	if err != nil {
		c.kill()
		return nil, fmt.Errorf("proxy process: %w", err)
	}
	return c, nil
}

// finish asks the child for its peaks; it exits after giving them.
func (c *upChild) finish() (upPeaks, error) {
	var pk upPeaks
	_, _ = io.WriteString(c.stdin, "stop\n")
	line, err := c.out.ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &pk)
	}
	c.kill()
	return pk, err
}

func (c *upChild) kill() {
	_ = c.stdin.Close()
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// measureUploads runs every scenario against the default configuration
// and, if the proxy has the body options and -small-buffered is set, one
// with MaxBuffered smaller; each in a fresh proxy process, with the
// simulator in a child process of its own.
func measureUploads(p params) ([]upResult, []string, error) {
	if n, err := raiseNoFile(); err != nil {
		fmt.Fprintln(os.Stderr, "proxybench uploads: raising RLIMIT_NOFILE:", err)
	} else if n < uint64(p.stalled)+100 {
		fmt.Fprintf(os.Stderr, "proxybench uploads: RLIMIT_NOFILE is %d: fewer than %d connections can be opened\n", n, p.stalled)
	}
	scens, err := upScenarios(p)
	if err != nil {
		return nil, nil, err
	}
	var notes []string
	configs := []int64{0}
	if p.smallBuffered > 0 {
		if hasBodyLimits() {
			configs = append(configs, int64(p.smallBuffered)<<20)
		} else {
			notes = append(notes, "This proxy has no `Config.MaxBody`, `MaxBuffered` or `BodyTimeout` (before 43775cf): only the default configuration is measured.")
		}
	}
	up, err := child()
	if err != nil {
		return nil, nil, err
	}
	defer up.close()
	var out []upResult
	for _, mb := range configs {
		for _, s := range scens {
			r, err := runUploadScenario(up, mb, s, p.upWait)
			if err != nil {
				return out, notes, fmt.Errorf("%s, %s: %w", configName(mb), s.Key, err)
			}
			fmt.Fprintf(os.Stderr, "uploads %-22s %-16s peak RSS %s (before %s), heap in use %s, goroutines %d; %s; all answered after %s\n",
				configName(mb), s.Key, mib(r.Peaks.RSS), mib(r.Baseline.RSS), mib(r.Peaks.HeapInuse), r.Peaks.Goroutines, r.answers(), r.allBy())
			for _, pr := range r.Probes {
				fmt.Fprintf(os.Stderr, "  probe %s: %s after %s\n", pr.What, pr.answer(), fmtD(pr.Took))
			}
			out = append(out, r)
		}
	}
	return out, notes, nil
}

func configName(maxBuffered int64) string {
	if maxBuffered == 0 {
		return "default"
	}
	return fmt.Sprintf("MaxBuffered %d MiB", maxBuffered>>20)
}

// runUploadScenario starts a proxy process, runs the scenario's clients
// against it and collects what each got and what the process sampled.
func runUploadScenario(up *upstream, maxBuffered int64, s upScenario, wait time.Duration) (upResult, error) {
	res := upResult{Config: configName(maxBuffered), Scenario: s, Statuses: map[string]int{}, Wait: wait}
	c, err := startUpChild(upJob{APIBase: up.apiBase, CertPEM: up.certPEM, MaxBuffered: maxBuffered})
	if err != nil {
		return res, err
	}
	res.Baseline, res.NoFile = c.hello.Baseline, c.hello.NoFile
	addr := c.hello.Addr

	start := time.Now()
	deadline := start.Add(wait)
	ends := make([]clientEnd, s.Clients)
	var conns sync.Map // index → net.Conn still open (no answer yet)
	var answered, sent sync.WaitGroup
	frame := chunkFrame(64 << 10)
	// Dial from a pool, so the listener's backlog is not overrun.
	var next atomic.Int64
	var dialers sync.WaitGroup
	for range min(s.Clients, 64) {
		dialers.Add(1)
		go func() {
			defer dialers.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= s.Clients {
					return
				}
				conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
				if err != nil {
					ends[i] = clientEnd{err: err}
					continue
				}
				ends[i].dialed = true
				_ = conn.SetDeadline(deadline)
				conns.Store(i, conn)
				answered.Add(1)
				sent.Add(1)
				go func() {
					defer answered.Done()
					br := bufio.NewReader(conn)
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						ends[i].err = err
						return // the connection stays open until the child has its peaks
					}
					ends[i].status, ends[i].at, ends[i].reason = resp.StatusCode, time.Since(start), resp.Header.Get(proxyHeader)
					n, _ := io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
					ends[i].empty = n == 0
					conns.Delete(i)
					_ = conn.Close()
				}()
				go func() {
					defer sent.Done()
					_ = s.write(conn, i, addr, frame)
				}()
			}
		}()
	}
	dialers.Wait()
	if s.Stall {
		// Every stalled upload has sent what it will: how does an ordinary
		// request of the same token fare now?
		sent.Wait()
		res.Probes = probes(addr, deadline)
	}
	answered.Wait()
	res.Took = time.Since(start)
	pk, err := c.finish()
	conns.Range(func(_, v any) bool { _ = v.(net.Conn).Close(); return true })
	if err != nil {
		return res, fmt.Errorf("proxy process's peaks: %w", err)
	}
	res.Peaks = pk
	var ats []time.Duration
	for _, e := range ends {
		if !e.dialed {
			res.DialErrors++
		}
		if e.status == 0 {
			res.NoAnswer++
			if res.FirstError == "" && e.err != nil {
				res.FirstError = e.err.Error()
			}
			continue
		}
		res.Statuses[e.answer()]++
		ats = append(ats, e.at)
	}
	slices.Sort(ats)
	if len(ats) > 0 {
		res.Median, res.Last = ats[(len(ats)-1)/2], ats[len(ats)-1]
	}
	if res.NoAnswer == 0 {
		res.AllBy = res.Last
	}
	return res, nil
}

// chunkFrame is one chunk of n bytes of chunked transfer coding.
func chunkFrame(n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%x\r\n", n)
	b.Write(bytes.Repeat([]byte{'x'}, n))
	b.WriteString("\r\n")
	return b.Bytes()
}

// write sends the request's headers and body as the scenario says. It
// returns at the first failed write (the proxy answered and closed, or the
// wait ended).
func (s upScenario) write(conn net.Conn, i int, host string, frame []byte) error {
	var h strings.Builder
	fmt.Fprintf(&h, "POST /api/v10/channels/%d/messages HTTP/1.1\r\nHost: %s\r\nAuthorization: %s\r\nContent-Type: application/octet-stream\r\nUser-Agent: proxybench-uploads\r\n", 100000+i, host, hostileToken)
	if s.Chunked {
		h.WriteString("Transfer-Encoding: chunked\r\n\r\n")
	} else {
		fmt.Fprintf(&h, "Content-Length: %d\r\n\r\n", s.Announce)
	}
	if _, err := io.WriteString(conn, h.String()); err != nil {
		return err
	}
	const piece = 64 << 10
	raw := frame[len(frame)-2-piece : len(frame)-2] // the chunk's bytes alone
	for left := s.Send; left > 0; {
		n := min(left, piece)
		var err error
		switch {
		case !s.Chunked:
			_, err = conn.Write(raw[:n])
		case n == piece:
			_, err = conn.Write(frame)
		default:
			_, err = conn.Write(chunkFrame(int(n)))
		}
		if err != nil {
			return err
		}
		left -= n
	}
	if s.Chunked && !s.Stall {
		_, err := io.WriteString(conn, "0\r\n\r\n")
		return err
	}
	return nil
}

// probes sends one GET and one small message of the hostile token, one
// after the other, while the stalled uploads wait.
func probes(addr string, deadline time.Time) []probe {
	cl := &http.Client{Timeout: max(time.Until(deadline), time.Second), Transport: &http.Transport{DisableKeepAlives: true}}
	defer cl.CloseIdleConnections()
	base := "http://" + addr + "/api/v10"
	var out []probe
	for _, pr := range []struct {
		what, method, path, body string
	}{
		{"GET /channels/{id}", http.MethodGet, "/channels/4242", ""},
		{"POST /channels/{id}/messages, 19-byte JSON body", http.MethodPost, "/channels/4242/messages", `{"content":"probe"}`},
	} {
		var body io.Reader
		if pr.body != "" {
			body = strings.NewReader(pr.body)
		}
		req, _ := http.NewRequest(pr.method, base+pr.path, body)
		req.Header.Set("Authorization", hostileToken)
		if pr.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		t0 := time.Now()
		resp, err := cl.Do(req)
		r := probe{What: pr.what, Took: time.Since(t0)}
		if err != nil {
			r.Err = err.Error()
		} else {
			r.Status, r.Reason = resp.StatusCode, resp.Header.Get(proxyHeader)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			r.Took = time.Since(t0)
		}
		out = append(out, r)
	}
	return out
}

// proxyHeader is the header of the proxy's own answers (proxy.ProxyHeader).
const proxyHeader = "X-Sluice-Proxy"

func (pr probe) answer() string {
	switch {
	case pr.Status == 0:
		return "no answer (" + pr.Err + ")"
	case pr.Reason != "":
		return fmt.Sprintf("%d (%s)", pr.Status, pr.Reason)
	default:
		return strconv.Itoa(pr.Status)
	}
}

// answer is "413 body_too_large": the status and, for the proxy's own
// answers, their X-Sluice-Proxy reason; "200 (empty, no X-Sluice-Proxy)"
// for an answer that is neither the proxy's nor carries a body.
func (e clientEnd) answer() string {
	switch {
	case e.reason != "":
		return fmt.Sprintf("%d %s", e.status, e.reason)
	case e.empty:
		return fmt.Sprintf("%d (empty, no %s)", e.status, proxyHeader)
	default:
		return strconv.Itoa(e.status)
	}
}

// answers is what the clients got, "413 body_too_large ×12, 503 overloaded ×8".
func (r upResult) answers() string {
	var keys []string
	for k := range r.Statuses {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%s", k, commas(int64(r.Statuses[k]))))
	}
	if r.NoAnswer > 0 {
		what := fmt.Sprintf("no answer ×%s", commas(int64(r.NoAnswer)))
		if r.DialErrors > 0 {
			what += fmt.Sprintf(" (%s not connected)", commas(int64(r.DialErrors)))
		}
		parts = append(parts, what)
	}
	return strings.Join(parts, ", ")
}

func (r upResult) median() string {
	if len(r.Statuses) == 0 {
		return "–"
	}
	return fmtD(r.Median)
}

func (r upResult) allBy() string {
	if r.AllBy > 0 {
		return fmtD(r.AllBy)
	}
	return fmt.Sprintf("not all within %v", r.Wait)
}

// mib formats bytes as MiB with one decimal.
func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// commas writes n with thousands separators.
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func (r report) writeUploads(b *strings.Builder) {
	b.WriteString("\n### Memory under hostile uploads\n\n")
	fmt.Fprintf(b, "Each row is a fresh process serving `proxy.Proxy` behind a loopback `net/http` server (HTTP/1.1, `ReadHeaderTimeout` 10 s, `IdleTimeout` 2 min, as `sluice proxy` serves it) in front of a simulator in a child process of its own (default Discord-like rules); the clients are raw TCP connections of this process, every one with the token `%s`, to `POST /api/v10/channels/{id}/messages` (a distinct id each), `Content-Type: application/octet-stream`. The proxy's process samples its RSS (`/proc/self/statm`), heap in use (heap objects and unused heap spans, `runtime/metrics`) and goroutines every 10 ms from just before the first client; peak RSS is the larger of the samples and `VmHWM` (reset by writing 5 to `/proc/self/clear_refs` before the first client, when the kernel allows it). Before: after `runtime.GC()`, just before the first client. A client without an answer after %v is counted as no answer. Answer times are from the start of the scenario (before the first connection) to the answer's status line.\n\n", hostileToken, r.p.upWait)
	for _, n := range r.upNotes {
		b.WriteString(n + "\n\n")
	}
	var keys []string
	by := map[string][]upResult{}
	for _, u := range r.uploads {
		if _, ok := by[u.Scenario.Key]; !ok {
			keys = append(keys, u.Scenario.Key)
		}
		by[u.Scenario.Key] = append(by[u.Scenario.Key], u)
	}
	for _, k := range keys {
		rs := by[k]
		fmt.Fprintf(b, "**%s** (`%s`)\n\n", rs[0].Scenario.describe(), k)
		b.WriteString("| config | peak RSS (before) | peak heap in use (before) | peak goroutines (before) | goroutines at the heap's peak | answers | median answer | all answered after |\n|---|---:|---:|---:|---:|---|---:|---:|\n")
		for _, r := range rs {
			fmt.Fprintf(b, "| %s | %s (%s) | %s (%s) | %s (%d) | %s | %s | %s | %s |\n", r.Config,
				mib(r.Peaks.RSS), mib(r.Baseline.RSS), mib(r.Peaks.HeapInuse), mib(r.Baseline.HeapInuse),
				commas(int64(r.Peaks.Goroutines)), r.Baseline.Goroutines, commas(int64(r.Peaks.GoroutinesAtHeapPeak)),
				r.answers(), r.median(), r.allBy())
		}
		b.WriteString("\n")
		for _, r := range rs {
			var bits []string
			for _, pr := range r.Probes {
				bits = append(bits, fmt.Sprintf("%s: %s after %s", pr.What, pr.answer(), fmtD(pr.Took)))
			}
			if len(bits) > 0 {
				fmt.Fprintf(b, "- %s, an ordinary request of the same token once every stalled upload had sent its bytes: %s.\n", r.Config, strings.Join(bits, "; "))
			}
			if r.FirstError != "" {
				fmt.Fprintf(b, "- %s, first client error: `%s`.\n", r.Config, r.FirstError)
			}
			if r.Peaks.ServerErrors > 0 {
				fmt.Fprintf(b, "- %s, the server logged %d lines, the first: `%s`.\n", r.Config, r.Peaks.ServerErrors, r.Peaks.FirstServerError)
			}
			fmt.Fprintf(b, "- %s: `VmHWM` %s (reset: %v), highest sampled RSS %s, %d samples; RLIMIT_NOFILE %d; scenario took %.1f s.\n", r.Config,
				mib(r.Peaks.HWM), r.Peaks.HWMReset, mib(r.Peaks.SampledRSS), r.Peaks.Samples, r.NoFile, r.Took.Seconds())
		}
		b.WriteString("\n")
	}
}
