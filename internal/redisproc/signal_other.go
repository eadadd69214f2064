//go:build !unix

package redisproc

import "os"

// sigStop and sigCont are nil where there is no SIGSTOP: Pause and Resume
// do nothing.
var sigStop, sigCont os.Signal
