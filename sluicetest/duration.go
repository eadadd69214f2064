package sluicetest

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration that reads from JSON and YAML either as a Go
// duration string ("250ms", "10m") or as a number of seconds (0.25, 600).
// It writes itself back as a duration string.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	return d.set(v)
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string or a number of seconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Tag == "!!int" || n.Tag == "!!float" {
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil {
			return err
		}
		return d.set(f)
	}
	return d.set(n.Value)
}

func (d *Duration) set(v any) error {
	switch x := v.(type) {
	case float64:
		if x < 0 || x > (100*365*24*time.Hour).Seconds() {
			return fmt.Errorf("sluicetest: duration %v seconds out of range", x)
		}
		*d = Duration(time.Duration(x * float64(time.Second)))
		return nil
	case string:
		p, err := time.ParseDuration(x)
		if err != nil {
			return fmt.Errorf("sluicetest: %w", err)
		}
		if p < 0 {
			return fmt.Errorf("sluicetest: negative duration %q", x)
		}
		*d = Duration(p)
		return nil
	default:
		return fmt.Errorf("sluicetest: duration must be a string or a number of seconds, got %T", v)
	}
}
