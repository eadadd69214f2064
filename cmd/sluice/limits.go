package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice"
)

// The file of "sluice proxy -limits": declared limits (sluice.Limit) in
// YAML or JSON, e.g.
//
//	no_default_limits: false
//	limits:
//	  - name: member_roles
//	    routes:
//	      - PUT /guilds/{guild_id}/members/{user_id}/roles/{role_id}
//	      - DELETE /guilds/{guild_id}/members/{user_id}/roles/{role_id}
//	    per: guild_id
//	    count: 10
//	    window: 10s
//	    source: https://...
//
// docs/declared-limits.md describes the format.

// limitsFile is the file's top level.
type limitsFile struct {
	Limits          []limitEntry `yaml:"limits"`
	NoDefaultLimits bool         `yaml:"no_default_limits"`
}

// limitEntry is one entry of limits: a sluice.Limit without Group, its
// Window a Go duration string. Count is a pointer so that a missing count
// is told apart from a zero one.
type limitEntry struct {
	Name   string   `yaml:"name"`
	Routes []string `yaml:"routes"`
	Fields []string `yaml:"fields"`
	Per    string   `yaml:"per"`
	Count  *int     `yaml:"count"`
	Window string   `yaml:"window"`
	Source string   `yaml:"source"`
}

// The fields of the file, in the order the docs give them, and what each
// must hold (for errors).
var (
	limitsFileFields  = []string{"limits", "no_default_limits"}
	limitEntryFields  = []string{"name", "routes", "fields", "per", "count", "window", "source"}
	limitsFieldWant   = map[string]string{"limits": "a list of limits", "no_default_limits": "true or false"}
	limitEntryWant    = map[string]string{"routes": "a list of \"METHOD /template\" strings", "fields": "a list of strings", "count": "a whole number", "window": "a duration such as \"10s\""}
	limitPers         = []string{"guild_id", "channel_id", "webhook_id"}
	yamlErrorLineRE   = regexp.MustCompile(`^line (\d+): (.*)$`)
	yamlUnknownFieldR = regexp.MustCompile(`^field (\S+) not found in type `)
)

// readLimitsFile reads the declared limits of "sluice proxy -limits" from
// path, a .yaml, .yml or .json file (JSON is read as the YAML it is), and
// returns them with the file's no_default_limits. Unknown fields are
// refused. Every error names the file and, for an entry, its index and
// name and the field at fault. The limits are checked only as far as the
// file goes (each field present and of its type, per one of the major
// parameters, window a positive duration); sluice.New checks the rest
// (checkLimits).
func readLimitsFile(path string) ([]sluice.Limit, bool, error) {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml", ".json":
	default:
		return nil, false, fmt.Errorf("%s: want a .yaml, .yml or .json file", path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, false, err // names the file
	}
	var file limitsFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	switch err := dec.Decode(&file); {
	case errors.Is(err, io.EOF):
		return nil, false, fmt.Errorf("%s: empty; want a mapping with a \"limits:\" list", path)
	case err != nil:
		return nil, false, fmt.Errorf("%s: %s", path, describeYAMLError(data, err))
	}
	if err := dec.Decode(new(yaml.Node)); !errors.Is(err, io.EOF) {
		return nil, false, fmt.Errorf("%s: more than one YAML document; want one", path)
	}
	limits := make([]sluice.Limit, 0, len(file.Limits))
	for i, e := range file.Limits {
		l, err := e.limit()
		if err != nil {
			return nil, false, fmt.Errorf("%s: %s: %w", path, entryName(i, e.Name), err)
		}
		limits = append(limits, l)
	}
	return limits, file.NoDefaultLimits, nil
}

// limit checks an entry as far as the file goes and makes it a Limit.
func (e limitEntry) limit() (sluice.Limit, error) {
	switch {
	case strings.TrimSpace(e.Name) == "":
		return sluice.Limit{}, errors.New("name is missing")
	case len(e.Routes) == 0:
		return sluice.Limit{}, errors.New("routes is missing: want a list of \"METHOD /template\", e.g. \"PUT /guilds/{guild_id}/members/{user_id}/roles/{role_id}\"")
	case e.Per != "" && !slices.Contains(limitPers, e.Per):
		return sluice.Limit{}, fmt.Errorf("per %q: want %s (or no per: one group for every request)", e.Per, strings.Join(limitPers, ", "))
	case e.Count == nil:
		return sluice.Limit{}, errors.New("count is missing: want the requests admitted per window, 1 or more")
	case *e.Count < 1:
		return sluice.Limit{}, fmt.Errorf("count must be 1 or more, got %d", *e.Count)
	case e.Window == "":
		return sluice.Limit{}, errors.New("window is missing: want a Go duration such as \"10s\" or \"10m\"")
	}
	window, err := time.ParseDuration(e.Window)
	switch {
	case err != nil:
		return sluice.Limit{}, fmt.Errorf("window %q is not a Go duration such as \"10s\" or \"10m\"", e.Window)
	case window <= 0:
		return sluice.Limit{}, fmt.Errorf("window must be more than 0s, got %s", e.Window)
	}
	return sluice.Limit{
		Name: e.Name, Routes: e.Routes, Fields: e.Fields, Per: e.Per,
		Count: *e.Count, Window: window, Source: e.Source,
	}, nil
}

// entryName is how errors name the i-th entry of limits.
func entryName(i int, name string) string {
	if name == "" {
		return fmt.Sprintf("limits[%d]", i)
	}
	return fmt.Sprintf("limits[%d] (%q)", i, name)
}

// describeYAMLError rewrites an error of the decoder: each "line N: ..."
// of an unmarshal error is told as the field at fault (an unknown one, or
// one whose value has the wrong type), with the entry of limits it is in;
// a syntax error is returned as it is.
func describeYAMLError(data []byte, err error) string {
	var te *yaml.TypeError
	if !errors.As(err, &te) {
		return err.Error()
	}
	var doc yaml.Node
	if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
		return err.Error()
	}
	msgs := make([]string, len(te.Errors))
	for i, msg := range te.Errors {
		msgs[i] = msg
		m := yamlErrorLineRE.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		line, _ := strconv.Atoi(m[1])
		if where := locateYAMLError(doc.Content[0], line, m[2]); where != "" {
			msgs[i] = where + fmt.Sprintf(" (line %d)", line)
		}
	}
	return strings.Join(msgs, "; ")
}

// locateYAMLError says which field of the file the decoder's message msg
// about line is about, or "" if it cannot tell.
func locateYAMLError(root *yaml.Node, line int, msg string) string {
	if root.Kind != yaml.MappingNode {
		if root.Line == line {
			return "want a mapping with a \"limits:\" list at the top"
		}
		return ""
	}
	unknown := ""
	if m := yamlUnknownFieldR.FindStringSubmatch(msg); m != nil {
		unknown = m[1]
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if !slices.Contains(limitsFileFields, k.Value) {
			if k.Value == unknown && k.Line == line {
				return fmt.Sprintf("unknown field %q at the top (known fields: %s)", k.Value, strings.Join(limitsFileFields, ", "))
			}
			continue
		}
		if k.Value == "limits" && v.Kind == yaml.SequenceNode {
			for j, item := range v.Content {
				if where := locateEntryError(j, item, line, unknown); where != "" {
					return where
				}
			}
			continue
		}
		if (k.Line == line || v.Line == line) && unknown == "" && !decodes(k.Value, v) {
			return fmt.Sprintf("%s: want %s%s", k.Value, limitsFieldWant[k.Value], got(v))
		}
	}
	return ""
}

// locateEntryError is locateYAMLError for the i-th entry of limits, item.
func locateEntryError(i int, item *yaml.Node, line int, unknown string) string {
	if item.Kind != yaml.MappingNode {
		if item.Line == line && unknown == "" {
			return fmt.Sprintf("%s: want a mapping of name, routes, count, window, ...%s", entryName(i, ""), got(item))
		}
		return ""
	}
	name := ""
	for j := 0; j+1 < len(item.Content); j += 2 {
		if k, v := item.Content[j], item.Content[j+1]; k.Value == "name" && v.Kind == yaml.ScalarNode {
			name = v.Value
		}
	}
	for j := 0; j+1 < len(item.Content); j += 2 {
		k, v := item.Content[j], item.Content[j+1]
		if !slices.Contains(limitEntryFields, k.Value) {
			if k.Value == unknown && k.Line == line {
				return fmt.Sprintf("%s: unknown field %q (known fields: %s)", entryName(i, name), k.Value, strings.Join(limitEntryFields, ", "))
			}
			continue
		}
		if unknown == "" && k.Line <= line && line <= lastLine(v) && !decodes(k.Value, v) {
			want := limitEntryWant[k.Value]
			if want == "" {
				want = "a string"
			}
			return fmt.Sprintf("%s: %s: want %s%s", entryName(i, name), k.Value, want, got(v))
		}
	}
	return ""
}

// decodes reports whether v decodes into the Go type of the file's field
// named field.
func decodes(field string, v *yaml.Node) bool {
	var dst any
	switch field {
	case "limits":
		dst = new([]yaml.Node)
	case "no_default_limits":
		dst = new(bool)
	case "routes", "fields":
		dst = new([]string)
	case "count":
		dst = new(int)
	default:
		dst = new(string)
	}
	return v.Decode(dst) == nil
}

// got describes a scalar value for an error, " got \"ten\""; nothing for
// a list or a mapping.
func got(v *yaml.Node) string {
	switch v.Kind {
	case yaml.ScalarNode:
		return fmt.Sprintf(", got %q", v.Value)
	case yaml.SequenceNode:
		return ", got a list"
	case yaml.MappingNode:
		return ", got a mapping"
	}
	return ""
}

// lastLine is the last line a node's value reaches.
func lastLine(n *yaml.Node) int {
	last := n.Line
	for _, c := range n.Content {
		last = max(last, lastLine(c))
	}
	return last
}

// checkLimits checks the declared limits as every token's limiter will
// (sluice.New returns an *sluice.OptionError for a bad one), without
// starting anything that lasts: the limiter made to check them is closed
// at once. It returns sluice.New's error.
func checkLimits(limits []sluice.Limit, noDefaults bool) error {
	lim, err := sluice.New(sluice.Options{Limits: limits, NoDefaultLimits: noDefaults})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return lim.Close(ctx)
}
