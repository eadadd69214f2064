package leakybucket

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
		c.cmd.Env = append(os.Environ(), hammerEnv+"="+s.URL, hammerEnv+"_OUT="+c.out)
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
	for _, c := range children {
		wg.Go(func() {
			for c.lines.Scan() {
				c.log.WriteString(c.lines.Text() + "\n")
			}
		})
	}
	wg.Wait()
	type call struct {
		at       int64 // µs, Redis's clock
		admitted bool
	}
	var calls []call
	for i, c := range children {
		if err := c.cmd.Wait(); err != nil {
			t.Fatalf("child %d: %v\n%s", i, err, c.log.String())
		}
		data, err := os.ReadFile(c.out)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(data)) {
			at, adm, ok := strings.Cut(strings.TrimSpace(line), " ")
			us, err := strconv.ParseInt(at, 10, 64)
			if !ok || err != nil {
				t.Fatalf("child %d wrote %q", i, line)
			}
			calls = append(calls, call{us, adm == "1"})
		}
	}
	if len(calls) != hammerProcesses*hammerGoroutines*hammerCalls {
		t.Fatalf("%d calls recorded, want %d", len(calls), hammerProcesses*hammerGoroutines*hammerCalls)
	}
	slices.SortStableFunc(calls, func(a, b call) int { return int(a.at - b.at) })

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
	c := redis.NewClient(opt)
	defer c.Close()
	// No Timeout: a call cut short may still have been charged, and the
	// test must see every admission.
	r, err := NewRedis(c, RedisOptions{Timeout: -1})
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
	var wg sync.WaitGroup
	for g := range hammerGoroutines {
		wg.Go(func() {
			for range hammerCalls {
				res, err := r.Check(ctx, "one key", hammerLimit)
				if err != nil {
					t.Error(err)
					return
				}
				adm := "0"
				if !res.Blocked {
					adm = "1"
				}
				lines[g] = append(lines[g], strconv.FormatInt(res.At.UnixMicro(), 10)+" "+adm+"\n")
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
