package sluice_test

import (
	"os"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/sluicehq/sluice"
)

func BenchmarkZZHeap(b *testing.B) {
	runtime.MemProfileRate = 1
	base, tlsConf := benchUpstream(b, time.Second)
	paths := benchPaths(10001)
	lim, err := sluice.New(sluice.Options{BaseURL: base, Token: testToken, TLSConfig: tlsConf,
		GlobalLimit: benchGlobal, IdleBucketAfter: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer benchClose(b, lim)
	benchFill(b, lim, paths[:1])
	benchHeap()
	f, _ := os.Create("/tmp/heap0.out")
	pprof.Lookup("heap").WriteTo(f, 0)
	f.Close()
	benchFill(b, lim, paths[1:])
	benchHeap()
	f, _ = os.Create("/tmp/heap1.out")
	pprof.Lookup("heap").WriteTo(f, 0)
	f.Close()
}
