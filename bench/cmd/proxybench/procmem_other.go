//go:build !linux

package main

import "errors"

// raiseNoFile is not done on this system.
func raiseNoFile() (uint64, error) { return 0, errors.New("not on this system") }

// vmRSS is not measured on this system.
func vmRSS() uint64 { return 0 }

// vmHWM is not measured on this system.
func vmHWM() uint64 { return 0 }

// resetHWM is not possible on this system.
func resetHWM() bool { return false }
