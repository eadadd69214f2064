package main

import "syscall"

// childProcAttr puts a child in a process group of its own, so that a
// terminal's Ctrl-C reaches only the parent, which stops the children
// itself; and has the kernel kill the child if the parent dies without
// doing so.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
