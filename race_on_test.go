//go:build race

package sluice_test

// raceDetector is set when the tests run under -race, which slows every
// goroutine several times: pace targets that measure CPU-bound work are
// then relaxed (and logged), never limits.
const raceDetector = true
