//go:build !race

package sluice_test

// raceDetector: see race_on_test.go.
const raceDetector = false
