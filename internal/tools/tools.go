//go:build tools

// Package tools pins the module's required dependencies while the packages
// that import them are being written, so go mod tidy keeps them in go.mod.
package tools

import (
	_ "github.com/asynkron/protoactor-go/actor"
	_ "github.com/looplab/fsm"
	_ "github.com/stretchr/testify/require"
	_ "gopkg.in/yaml.v3"
)
