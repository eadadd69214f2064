//go:build unix

package redisproc

import (
	"os"
	"syscall"
)

// sigStop and sigCont freeze and thaw the server (Pause, Resume).
var sigStop, sigCont os.Signal = syscall.SIGSTOP, syscall.SIGCONT
