//go:build unix

package main

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user and system) this process has used, and
// whether it is known.
func cpuTime() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
