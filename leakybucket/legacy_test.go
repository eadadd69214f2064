package leakybucket

import (
	"errors"
	"testing"
	"time"
)

// TestLegacyTranslate checks the seed's translation of legacy limits, each
// case worked by hand from its formulas (in ms, Math.round half up):
// initial = max(minInterval ?? round(duration/max), 1), dripSize =
// max(round(max/(duration/initial)), 1), dripRate =
// max(round(duration/(max/dripSize)), 1).
func TestLegacyTranslate(t *testing.T) {
	for _, c := range []struct {
		in   Legacy
		want Limit
	}{
		// initial 100, dripSize round(10/10) = 1, dripRate round(1000/10) = 100.
		{Legacy{Max: 10, Duration: time.Second}, Limit{Size: 10, DripRate: 100 * time.Millisecond, DripSize: 1}},
		// initial 200, dripSize 1, dripRate 200.
		{Legacy{Max: 300, Duration: time.Minute}, Limit{Size: 300, DripRate: 200 * time.Millisecond, DripSize: 1}},
		// initial max(round(0.2), 1) = 1, dripSize round(5000/1000) = 5, dripRate round(1000/1000) = 1.
		{Legacy{Max: 5000, Duration: time.Second}, Limit{Size: 5000, DripRate: time.Millisecond, DripSize: 5}},
		// initial max(round(0.002), 1) = 1, dripSize round(1000/2) = 500, dripRate round(2/2) = 1.
		{Legacy{Max: 1000, Duration: 2 * time.Millisecond}, Limit{Size: 1000, DripRate: time.Millisecond, DripSize: 500}},
		// Half up: initial round(2.5) = 3, dripSize round(4/(10/3)) = round(1.2) = 1, dripRate round(2.5) = 3.
		{Legacy{Max: 4, Duration: 10 * time.Millisecond}, Limit{Size: 4, DripRate: 3 * time.Millisecond, DripSize: 1}},
		// initial round(333.33) = 333, dripSize round(0.999) = 1, dripRate round(333.33) = 333.
		{Legacy{Max: 3, Duration: time.Second}, Limit{Size: 3, DripRate: 333 * time.Millisecond, DripSize: 1}},
		// MinInterval sets the drip size: initial 50, dripSize round(100/20) = 5, dripRate round(1000/20) = 50.
		{Legacy{Max: 100, Duration: time.Second, MinInterval: 50 * time.Millisecond}, Limit{Size: 100, DripRate: 50 * time.Millisecond, DripSize: 5}},
		// initial 1000, dripSize max(round(10/60), 1) = 1, dripRate round(60000/10) = 6000: the
		// interval is not a spacing.
		{Legacy{Max: 10, Duration: time.Minute, MinInterval: time.Second}, Limit{Size: 10, DripRate: 6 * time.Second, DripSize: 1}},
		// Only a minimum interval: a bucket of one, dripping every max(round(minInterval), 1) ms.
		{Legacy{MinInterval: 250 * time.Millisecond}, Limit{Size: 1, DripRate: 250 * time.Millisecond, DripSize: 1}},
		{Legacy{MinInterval: 2500 * time.Microsecond}, Limit{Size: 1, DripRate: 3 * time.Millisecond, DripSize: 1}},
		{Legacy{MinInterval: 1400 * time.Microsecond}, Limit{Size: 1, DripRate: time.Millisecond, DripSize: 1}},
		{Legacy{MinInterval: 300 * time.Microsecond}, Limit{Size: 1, DripRate: time.Millisecond, DripSize: 1}},
		// The name carries over.
		{Legacy{Name: "notes", Max: 10, Duration: time.Second}, Limit{Name: "notes", Size: 10, DripRate: 100 * time.Millisecond, DripSize: 1}},
	} {
		got, ok, err := c.in.Translate()
		if err != nil || !ok || got != c.want {
			t.Errorf("%+v: got %+v ok=%v err=%v, want %+v", c.in, got, ok, err, c.want)
		}
	}
}

func TestLegacyDisabledAndInvalid(t *testing.T) {
	for _, in := range []Legacy{
		{},
		{Name: "x"},
		{Max: 10},                                // duration 0 disables, as in the seed
		{Max: 10, MinInterval: time.Millisecond}, // still the max part, with duration 0
	} {
		if lim, ok, err := in.Translate(); ok || err != nil || lim != (Limit{}) {
			t.Errorf("%+v: got %+v ok=%v err=%v, want disabled", in, lim, ok, err)
		}
	}
	for _, in := range []Legacy{
		{Max: 0, Duration: time.Second},
		{Max: -1, Duration: time.Second},
		{Max: 5, Duration: -time.Second},
		{MinInterval: -time.Millisecond},
		{Max: 5, Duration: time.Second, MinInterval: -time.Millisecond},
		{Max: MaxSize + 1, Duration: time.Second},
		{MinInterval: MaxDrain + time.Hour},
		{Max: 1, Duration: 1000 * 24 * time.Hour}, // drips every 1000 days
		{Name: "bad\x00name", Max: 1, Duration: time.Second},
	} {
		if _, ok, err := in.Translate(); ok || !errors.Is(err, ErrInvalidLimit) {
			t.Errorf("%+v: ok=%v err=%v, want ErrInvalidLimit", in, ok, err)
		}
	}
}

func TestShare(t *testing.T) {
	lim := Limit{Name: "api", Size: 10, DripRate: 100 * time.Millisecond, DripSize: 2}
	if got := lim.Share(1); got != lim {
		t.Errorf("Share(1) = %+v", got)
	}
	if got, want := lim.Share(3), (Limit{Name: "api", Size: 4, DripRate: 300 * time.Millisecond, DripSize: 2}); got != want {
		t.Errorf("Share(3) = %+v, want %+v", got, want)
	}
	if got := (Limit{Size: 2}).Share(4); got.Size != 1 || got.DripRate != 4*time.Second {
		t.Errorf("Share(4) of a bucket of 2 = %+v", got)
	}
	if err := (Limit{Size: 1, DripRate: MaxDrain}).Share(2).Validate(); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("a share beyond MaxDrain validated: %v", err)
	}
	if s := lim.String(); s != "api: size 10, 2 every 100ms" {
		t.Errorf("String() = %q", s)
	}
}
