//go:build !linux

package main

import "syscall"

// childProcAttr leaves a child in the parent's process group: without
// Pdeathsig, a terminal's Ctrl-C reaching it too is the safer way, and the
// end of its input cancels its load if the parent dies.
func childProcAttr() *syscall.SysProcAttr { return nil }
