package supervision

import "time"

// Intensity counts an actor's recent crashes. The zero value allows no
// crash at all; use NewIntensity.
type Intensity struct {
	// Max is the number of crashes within Window that is still tolerated.
	Max int
	// Window is how far back crashes count.
	Window time.Duration

	crashes []time.Time // ascending, within Window of the last crash
}

// NewIntensity tolerates max crashes within window.
func NewIntensity(max int, window time.Duration) *Intensity {
	return &Intensity{Max: max, Window: window}
}

// Crash records a crash at now. It returns the number of crashes within
// the window, this one included, and whether that exceeds Max.
func (in *Intensity) Crash(now time.Time) (recent int, exceeded bool) {
	kept := in.crashes[:0]
	for _, t := range in.crashes {
		if now.Sub(t) < in.Window {
			kept = append(kept, t)
		}
	}
	in.crashes = append(kept, now)
	return len(in.crashes), len(in.crashes) > in.Max
}
