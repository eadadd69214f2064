package main

import "syscall"

// childProcAttr puts a demo child in a process group of its own, so that a
// terminal's Ctrl-C reaches only the parent, which stops the children and
// collects what they did; and has the kernel kill the child if the parent
// dies without doing so.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
