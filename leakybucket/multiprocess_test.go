package leakybucket

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The hammer: processes × goroutines × calls on one key of one Redis.
const (
	hammerProcesses  = 4
	hammerGoroutines = 50
	hammerCalls      = 150 // per goroutine: 30,000 calls in all
	hammerEnv        = "LEAKYBUCKET_HAMMER"
)

// hammerLimit admits 10 at once and 3 every 4 ms: a drip size above 1, so
// the bound is S - 1 + D·(floor(w/R) + 1), and fast enough that the
// hammer's second or so sees hundreds of drips.
var hammerLimit = Limit{Name: "hammer", Size: 10, DripRate: 4 * time.Millisecond, DripSize: 3}

// TestRedisManyProcesses starts 4 copies of this test binary, each running
// TestHammerHelper: 50 goroutines calling Check on one key of one Redis as
// fast as they can, recording every call's outcome and Redis's time (the
// script's TIME, Result.At). The parent then checks, over all 12,000 calls:
//
//   - 0 overshoot: no interval between two admissions, at Redis's clock,
//     holds more admissions than the model allows (admitBound);
//   - the same result as the in-memory store on the same schedule: replaying
//     every call, in Redis's time order, into a Memory admits exactly as
//     many calls at every instant as Redis did.
func TestRedisManyProcesses(t *testing.T) {
	calls := runHammer(t, "")
	if len(calls) != hammerProcesses*hammerGoroutines*hammerCalls {
		t.Fatalf("%d calls recorded, want %d", len(calls), hammerProcesses*hammerGoroutines*hammerCalls)
	}

	// 0 overshoot, over every pair of admissions.
	var admitted []time.Time
	for _, c := range calls {
		if c.admitted {
			admitted = append(admitted, time.UnixMicro(c.at))
		}
	}
	checkBound(t, hammerLimit, admitted)

	// The same admissions as the in-memory store, instant by instant: calls
	// at one instant are alike, so their order within it does not matter.
	var m Memory
	perInstant := map[int64][2]int{} // at -> {Redis admitted, Memory admitted}
	for _, c := range calls {
		r, err := m.CheckAt("one key", hammerLimit, time.UnixMicro(c.at))
		if err != nil {
			t.Fatal(err)
		}
		n := perInstant[c.at]
		if c.admitted {
			n[0]++
		}
		if !r.Blocked {
			n[1]++
		}
		perInstant[c.at] = n
	}
	for at, n := range perInstant {
		if n[0] != n[1] {
			t.Fatalf("at %v Redis admitted %d calls, the in-memory store %d", time.UnixMicro(at), n[0], n[1])
		}
	}
	span := time.Duration(calls[len(calls)-1].at-calls[0].at) * time.Microsecond
	t.Logf("%d calls over %v from %d processes: %d admitted (bound for the span: %d), %d instants",
		len(calls), span, hammerProcesses, len(admitted), admitBound(hammerLimit, span), len(perInstant))
	if len(admitted) <= hammerLimit.Size || len(admitted) == len(calls) {
		t.Fatalf("%d of %d calls admitted: the hammer did not both fill the bucket and drain it", len(admitted), len(calls))
	}
}

// TestRedisManyProcessesCosts is TestRedisManyProcesses with calls of
// mixed costs, 1 to 10 units on the bucket of 10 (CheckN): no interval
// between two admissions, at Redis's clock, holds more units than the
// bound. Then the same with Redis killed once every process is halfway,
// with the default Timeout and FailClosed: every check after the kill is
// refused within the Timeout, and what was admitted before (or decided by
// Redis until it died) still keeps the bound.
func TestRedisManyProcessesCosts(t *testing.T) {
	for _, mode := range []string{"costs", "costs-kill"} {
		t.Run(mode, func(t *testing.T) {
			calls := runHammer(t, mode)
			if mode == "costs" && len(calls) != hammerProcesses*hammerGoroutines*hammerCalls {
				t.Fatalf("%d calls recorded, want %d", len(calls), hammerProcesses*hammerGoroutines*hammerCalls)
			}
			var admitted []time.Time
			var units []int
			total := 0
			for _, c := range calls {
				if c.admitted {
					admitted = append(admitted, time.UnixMicro(c.at))
					units = append(units, c.cost)
					total += c.cost
				}
			}
			checkBoundUnits(t, hammerLimit, admitted, units)
			span := time.Duration(calls[len(calls)-1].at-calls[0].at) * time.Microsecond
			t.Logf("%d calls decided by Redis over %v from %d processes: %d admitted, %d units (bound for the span: %d)",
				len(calls), span, hammerProcesses, len(admitted), total, admitBound(hammerLimit, span))
			if total <= hammerLimit.Size || len(admitted) == len(calls) {
				t.Fatalf("%d units in %d of %d calls admitted: the hammer did not both fill the bucket and drain it", total, len(admitted), len(calls))
			}
		})
	}
}

// hammerCall is one call a hammer process recorded.
type hammerCall struct {
	at       int64 // µs, Redis's clock
	admitted bool
	cost     int
}

// runHammer starts hammerProcesses copies of this test binary running
// TestHammerHelper in mode ("": calls of cost 1; "costs": costs 1 to 10;
// "costs-kill": costs, and Redis killed once each process has made half
// its calls), and returns every call decided by Redis, in Redis's time
// order.
func runHammer(t *testing.T, mode string) []hammerCall {
	s := redistest.Start(t)
	dir := t.TempDir()
	type child struct {
		cmd   *exec.Cmd
		stdin io.WriteCloser
		out   string
		lines *bufio.Scanner
		log   strings.Builder
	}
	children := make([]*child, hammerProcesses)
	for i := range children {
		c := &child{out: filepath.Join(dir, fmt.Sprint("calls-", i))}
		c.cmd = exec.Command(os.Args[0], "-test.run=^TestHammerHelper$", "-test.count=1", "-test.v")
		c.cmd.Env = append(os.Environ(), hammerEnv+"="+s.URL, hammerEnv+"_OUT="+c.out, hammerEnv+"_MODE="+mode)
		var err error
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatal(err)
		}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		c.cmd.Stderr = c.cmd.Stdout
		c.lines = bufio.NewScanner(stdout)
		if err := c.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		children[i] = c
	}
	// Each child connects and says "ready"; once all have, "go" starts them
	// together.
	for i, c := range children {
		ready := false
		for !ready && c.lines.Scan() {
			c.log.WriteString(c.lines.Text() + "\n")
			ready = c.lines.Text() == "ready"
		}
		if !ready {
			c.cmd.Wait()
			t.Fatalf("child %d ended before it was ready:\n%s", i, c.log.String())
		}
	}
	for _, c := range children {
		io.WriteString(c.stdin, "go\n")
		c.stdin.Close()
	}
	var wg sync.WaitGroup
	halfway := make(chan struct{}, len(children))
	for _, c := range children {
		wg.Go(func() {
			said := false
			for c.lines.Scan() {
				c.log.WriteString(c.lines.Text() + "\n")
				if !said && strings.Contains(c.lines.Text(), "halfway") {
					said = true
					halfway <- struct{}{}
				}
			}
			if !said { // ended before halfway: do not wait for it
				halfway <- struct{}{}
			}
		})
	}
	if mode == "costs-kill" {
		for range children {
			<-halfway
		}
		s.Kill()
	}
	wg.Wait()
	var calls []hammerCall
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, c.log.String())
		}
		data, err := os.ReadFile(c.out)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			f := strings.Fields(line)
			if len(f) != 3 {
				t.Fatalf("child %d wrote %q", i, line)
			}
			us, err1 := strconv.ParseInt(f[0], 10, 64)
			cost, err2 := strconv.Atoi(f[2])
			if err1 != nil || err2 != nil {
				t.Fatalf("child %d wrote %q", i, line)
			}
			calls = append(calls, hammerCall{us, f[1] == "1", cost})
		}
	}
	slices.SortStableFunc(calls, func(a, b hammerCall) int { return int(a.at - b.at) })
	return calls
}

// TestHammerHelper is one process of TestRedisManyProcesses; it does
// nothing (skips) unless that test started it.
func TestHammerHelper(t *testing.T) {
	url := os.Getenv(hammerEnv)
	if url == "" {
		t.Skip("a helper process of TestRedisManyProcesses")
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize = hammerGoroutines
	mode := os.Getenv(hammerEnv + "_MODE")
	if mode == "costs-kill" {
		// A killed Redis refuses at once: one dial attempt, and a pool
		// larger than the dials that will fail (one per goroutine), so that
		// go-redis's dial circuit breaker, whose goroutine outlives Close
		// by up to a second, never trips.
		opt.DialerRetries = 1
		opt.PoolSize = 4 * hammerGoroutines
	}
	c := redis.NewClient(opt)
	defer c.Close()
	// No Timeout: a call cut short may still have been charged, and the
	// test must see every admission. With Redis killed, the default
	// Timeout and FailClosed: a call cut short was refused, which only
	// errs on the strict side.
	opts := RedisOptions{Timeout: -1}
	if mode == "costs-kill" {
		opts = RedisOptions{}
	}
	r, err := NewRedis(c, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Ping(ctx).Result(); err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	if line, _ := bufio.NewReader(os.Stdin).ReadString('\n'); line != "go\n" {
		t.Fatalf("parent said %q", line)
	}
	lines := make([][]string, hammerGoroutines)
	var done atomic.Int64
	var half sync.Once
	var wg sync.WaitGroup
	for g := range hammerGoroutines {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(g)))
			buf := make([]Result, 0, 1)
			refused := false
			// With Redis killed, each goroutine calls until its first
			// refusal, past hammerCalls if need be.
			for i := 0; !refused && (i < hammerCalls || mode == "costs-kill"); i++ {
				if i == 40*hammerCalls {
					t.Error("Redis was not killed: no check refused")
					return
				}
				if done.Add(1) == hammerGoroutines*hammerCalls/2 {
					half.Do(func() { fmt.Println("halfway") })
				}
				cost := 1
				if mode != "" {
					cost = 1 + rng.IntN(10)
				}
				began := time.Now()
				res, err := r.CheckN(ctx, "one key", cost, []Limit{hammerLimit}, buf[:0])
				if errors.Is(err, ErrUnavailable) && mode == "costs-kill" {
					if took := time.Since(began); took > DefaultTimeout+400*time.Millisecond || !res[0].Blocked {
						t.Errorf("a check with Redis killed: %+v %v after %v", res, err, took)
						return
					}
					refused = true
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				adm := "0"
				if !res[0].Blocked {
					adm = "1"
				}
				lines[g] = append(lines[g], strconv.FormatInt(res[0].At.UnixMicro(), 10)+" "+adm+" "+strconv.Itoa(cost)+"\n")
			}
		})
	}
	wg.Wait()
	var out strings.Builder
	for _, ls := range lines {
		for _, l := range ls {
			out.WriteString(l)
		}
	}
	if err := os.WriteFile(os.Getenv(hammerEnv+"_OUT"), []byte(out.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}
