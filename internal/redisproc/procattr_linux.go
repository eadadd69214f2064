package redisproc

import "syscall"

// sysProcAttr puts the server in a process group of its own, so that a
// terminal's Ctrl-C reaches only the program that started it, and has the
// kernel kill it when that program dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
