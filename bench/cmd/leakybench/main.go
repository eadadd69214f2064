// Command leakybench measures package leakybucket's checks side by side
// with its peers', in alternating rounds, and prints the results in the
// format of `go test -bench`, for benchstat:
//
//	cd bench && go run ./cmd/leakybench -rounds 5 > /tmp/leakybench.txt
//	benchstat -col /limiter /tmp/leakybench.txt
//
// On Redis (one private redis-server on a unix socket in a temporary
// directory, started and stopped by this program, flushed before every
// benchmark), at 1 and 64 goroutines, over 10,000 keys, with a limit no
// check reaches (every check takes the admitting path, which writes):
//
//   - leakybucket: Redis.Check with the default options (Timeout 100 ms,
//     FailClosed), and with Timeout -1 (no bound but the context's);
//   - redis_rate: github.com/go-redis/redis_rate/v10, Limiter.Allow (GCRA
//     in one Lua script, EVALSHA);
//   - ulule: github.com/ulule/limiter/v3 with its Redis store,
//     Limiter.Get (a fixed window: INCRBY and PEXPIRE in one Lua script).
//
// Every limiter has a go-redis client of its own with the same options
// (PoolSize -pool, 64 by default, so that 64 goroutines never queue for a
// connection; the rest go-redis's defaults).
//
// In memory, at 1 goroutine and GOMAXPROCS goroutines:
//
//   - leakybucket: Memory.Check;
//   - rate: golang.org/x/time/rate as a keyed limiter is used, a sync.Map
//     from key to *rate.Limiter, Load then Allow;
//
// each in two cases: "kept", 10,000 keys whose buckets never drain between
// two visits, and "drained", 10,000 keys whose buckets have fully drained
// between two visits (a bucket of 10 dripping 10 every microsecond; a
// round over the keys takes far longer), so that leakybucket finds them
// drained (kept for their return, Memory.KeepDrained) and x/time/rate finds
// its limiter full.
//
// Each round runs every benchmark once, the order of the limiters rotating
// from round to round, so that a change of the machine's load hits them
// alike. Every line is one benchmark's run in one round:
//
//	BenchmarkRedis/limiter=leakybucket/goroutines=64-2  100000  18000 ns/op  55555 checks/s  0 refused/op  900 B/op  20 allocs/op
//
// "refused/op" counts the checks leakybucket could not decide within its
// Timeout (decided by FailClosed); the peers have no timeout and count
// errors as "errors/op". "redis-µs/op" is the time Redis spent in the
// limiter's scripts per check (INFO commandstats), and "keys" how many
// keys Redis held at the end: every limiter's limit is chosen so that each
// check writes its key and the key outlives a round over the keys (with
// none, a limiter would be measured doing less than its work). Progress goes to stderr. It exits 1 if a
// benchmark failed, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redisproc"
)

func main() {
	testing.Init()
	rounds := flag.Int("rounds", 5, "rounds: each runs every benchmark once")
	benchtime := flag.Duration("benchtime", 2*time.Second, "duration of each benchmark in each round")
	only := flag.String("only", "", `"redis" or "memory": run only those benchmarks`)
	filter := flag.String("limiters", "", "comma-separated limiters to run (leakybucket, leakybucket-notimeout, redis_rate, ulule, rate); all if empty")
	pool := flag.Int("pool", 64, "go-redis PoolSize of each Redis limiter's client")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	flag.Parse()
	if *rounds < 1 || *benchtime <= 0 || (*only != "" && *only != "redis" && *only != "memory") {
		flag.Usage()
		os.Exit(2)
	}
	if err := flag.Set("test.benchtime", benchtime.String()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*rounds, *only, *filter, *pool); err != nil {
		pprof.StopCPUProfile()
		fmt.Fprintln(os.Stderr, "leakybench:", err)
		os.Exit(1)
	}
}

// bench is one benchmark: a limiter in a case, run by testing.Benchmark.
type bench struct {
	group   string // "Redis", "MemoryKept", "MemoryDrained"
	limiter string
	// run measures b.N checks from goroutines goroutines.
	run func(b *testing.B, goroutines int) error
}

func run(rounds int, only, filter string, pool int) error {
	ctx := context.Background()
	var benches []bench
	var levels = map[string][]int{
		"Redis":         {1, 64},
		"MemoryKept":    {1, runtime.GOMAXPROCS(0)},
		"MemoryDrained": {1, runtime.GOMAXPROCS(0)},
	}
	if only != "memory" {
		bin := redisproc.Binary()
		if bin == "" {
			return fmt.Errorf("redis-server is not on PATH")
		}
		rs, err := redisproc.Start(ctx, bin)
		if err != nil {
			return err
		}
		defer rs.Close()
		rbs, closeAll, err := redisBenches(rs.URL, pool)
		if err != nil {
			return err
		}
		defer closeAll()
		benches = append(benches, rbs...)
	}
	if only != "redis" {
		benches = append(benches, memoryBenches()...)
	}
	if filter != "" {
		keep := map[string]bool{}
		for _, name := range strings.Split(filter, ",") {
			keep[strings.TrimSpace(name)] = true
		}
		var kept []bench
		for _, b := range benches {
			if keep[b.limiter] {
				kept = append(kept, b)
			}
		}
		benches = kept
	}

	fmt.Printf("goos: %s\ngoarch: %s\npkg: github.com/sluicehq/sluice/bench/cmd/leakybench\n", runtime.GOOS, runtime.GOARCH)
	if cpu := cpuName(); cpu != "" {
		fmt.Printf("cpu: %s\n", cpu)
	}
	failed := false
	for round := range rounds {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", round+1, rounds)
		for _, group := range []string{"Redis", "MemoryKept", "MemoryDrained"} {
			var gb []bench
			for _, b := range benches {
				if b.group == group {
					gb = append(gb, b)
				}
			}
			for _, g := range levels[group] {
				for i := range gb {
					b := gb[(i+round)%len(gb)]
					name := fmt.Sprintf("Benchmark%s/limiter=%s/goroutines=%d-%d", b.group, b.limiter, g, runtime.GOMAXPROCS(0))
					var err error
					res := testing.Benchmark(func(tb *testing.B) {
						if e := b.run(tb, g); e != nil {
							err = e
						}
					})
					if err != nil {
						fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
						failed = true
						continue
					}
					fmt.Printf("%s\t%s\t%s\n", name, res.String(), res.MemString())
				}
			}
		}
	}
	if failed {
		return fmt.Errorf("some benchmarks failed")
	}
	return nil
}

// newClient returns a go-redis client of url with PoolSize pool.
func newClient(url string, pool int) (*redis.Client, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = pool
	return redis.NewClient(opt), nil
}

// cpuName returns the machine's CPU model, as go test prints it.
func cpuName() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
