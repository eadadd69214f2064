//go:build !linux

package redisproc

import "syscall"

// sysProcAttr leaves the server in the caller's process group: without
// Pdeathsig, a terminal's Ctrl-C reaching both is what stops it if the
// caller cannot.
func sysProcAttr() *syscall.SysProcAttr { return nil }
