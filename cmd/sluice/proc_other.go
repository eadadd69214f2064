//go:build !linux

package main

import "syscall"

// childProcAttr leaves a demo child in the parent's process group: without
// Pdeathsig, a terminal's Ctrl-C reaching it too (it then cancels its load
// and reports, as the parent asks anyway) is the safer way, and the end of
// its input stops it if the parent dies.
func childProcAttr() *syscall.SysProcAttr { return nil }
